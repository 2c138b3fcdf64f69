/* cmd_serve.c — `nextn serve`: the OpenAI-compatible HTTP server. Loads the
 * model, its MTP head, the tokenizer and chat template, starts the engine and
 * the server, and waits for SIGINT / SIGTERM to shut both down cleanly. */
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const char *serve_help =
    "usage: nextn serve [-m DIR] [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx N]\n"
    "                   [--cache-ram MB] [--cache-dir DIR] [--mtp on|off|DIR] [--api-key KEY]\n"
    "Serves the model over HTTP with OpenAI's API (POST /v1/chat/completions, /v1/completions,\n"
    "/tokenize, /detokenize; GET /v1/models, /v1/models/ID, /health, /metrics), with MTP\n"
    "speculative decoding (the checkpoint's head by default, drafting when it pays).\n\n" CLI_MODEL_HELP
    "  --host ADDR        IPv4 address to bind (default 127.0.0.1: this machine only)\n"
    "  --port N           TCP port (default 8080; 0 picks a free one, see --port-file)\n"
    "  --port-file F      write the port listened on to F once ready\n"
    "  --parallel N       requests decoded at once (default 4); more wait in a queue\n"
    "  --max-queue N      waiting requests before new ones get 503 (default 64)\n"
    "  --ctx N            tokens per request: prompt + output (default 4096)\n"
    "  --prefill-chunk N  prompt tokens a request reads per scheduler round (default 64)\n"
    "  --cache-ram MB     prefix cache budget in RAM (default 1024; 0 = no RAM tier: no cache\n"
    "                     at all without --cache-dir)\n"
    "  --cache-dir DIR    also keep prefix-cache checkpoints in DIR (survives restarts)\n"
    "  --cache-disk MB    budget of --cache-dir, least recently used files deleted (default 8192; 0 = no limit)\n"
    "  --mtp on|off|DIR   the MTP drafter: the checkpoint's own (default), none, or a directory\n"
    "  --draft K|auto     drafts per round (default: the drafter's block_size - 1); auto adapts\n"
    "                     K per request to the measured acceptance and round cost\n"
    "  --draft-policy P   adaptive (default): for each number of running requests, measure\n"
    "                     rounds with and without drafts and run the faster; always: draft\n"
    "                     every round\n"
    "  --draft-head-bits B|auto  draft with a B-bit copy of the LM head (default auto, 0: as\n"
    "                     stored; see nextn generate --help)\n"
    CLI_DRAFT_SCREEN_HELP
    "  --api-key KEY      require Authorization: Bearer KEY on /v1/, /tokenize, /detokenize, /metrics\n"
    "  --model-name NAME  the model id /v1/models lists (default: the directory's name)\n"
    "  --chat-template F  use this template file instead of the checkpoint's\n"
    "  --max-body BYTES   request body limit (default 4194304)\n";

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void log_line(void *ctx, const char *line) {
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "%s nextn: %s\n", when, line);
    pthread_mutex_unlock(&log_mu);
}

typedef struct {
    const char *host, *port_file, *cache_dir, *mtp, *api_key, *model_name, *chat_template;
    cli_mtp mtp_mode;   /* what --mtp (mtp) says */
    nx_draft_policy policy;
    long port, parallel, max_queue, ctx, chunk, cache_mb, disk_mb, draft, head_bits, screen, max_body;
} serve_opts;

static int parse(int argc, char **argv, cli_model_opts *mo, serve_opts *o) {
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, mo);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(serve_help, stdout);
            return -1;
        }
        if (!(v = cli_value(argc, argv, &i))) return 2;
        struct {
            const char *name;
            long *out, lo, hi;
        } nums[] = {{"--port", &o->port, 0, 65535},          {"--parallel", &o->parallel, 1, 64},
                    {"--max-queue", &o->max_queue, 1, 100000}, {"--ctx", &o->ctx, 16, 1 << 20},
                    {"--prefill-chunk", &o->chunk, 2, 1 << 20}, {"--cache-ram", &o->cache_mb, 0, 1 << 24},
                    {"--cache-disk", &o->disk_mb, 0, 1 << 30},
                    {"--draft", &o->draft, 1, NX_SPEC_MAX_DRAFT},
                    {"--max-body", &o->max_body, 1024, 1L << 30}};
        int done = strcmp(a, "--draft") == 0 && strcmp(v, "auto") == 0;
        if (done) o->draft = NX_DRAFT_AUTO;
        for (size_t k = 0; k < sizeof nums / sizeof *nums && !done; k++)
            if (strcmp(a, nums[k].name) == 0) {
                if (cli_parse_int(v, nums[k].lo, nums[k].hi, nums[k].out))
                    return cli_usage_error("%s wants an integer in %ld..%ld, got '%s'", a, nums[k].lo, nums[k].hi, v);
                done = 1;
            }
        if (done) continue;
        if (strcmp(a, "--draft-head-bits") == 0) {
            if (cli_parse_head_bits(v, &o->head_bits))
                return cli_usage_error("--draft-head-bits wants auto, 0, 2, 3, 4, 5, 6 or 8, got '%s'", v);
        } else if (strcmp(a, "--draft-screen") == 0) {
            if (cli_parse_screen(v, &o->screen))
                return cli_usage_error("--draft-screen wants auto, off or a number of rows, got '%s'", v);
        } else if (strcmp(a, "--draft-policy") == 0) {
            if (strcmp(v, "adaptive") != 0 && strcmp(v, "always") != 0)
                return cli_usage_error("--draft-policy wants adaptive or always, got '%s'", v);
            o->policy = strcmp(v, "always") == 0 ? NX_DRAFTS_ALWAYS : NX_DRAFTS_ADAPTIVE;
        } else if (strcmp(a, "--host") == 0) o->host = v;
        else if (strcmp(a, "--port-file") == 0) o->port_file = v;
        else if (strcmp(a, "--cache-dir") == 0) o->cache_dir = v;
        else if (strcmp(a, "--mtp") == 0) {
            if (cli_parse_mtp(v, &o->mtp_mode)) return 2;
            o->mtp = v;
        }
        else if (strcmp(a, "--api-key") == 0) {
            /* an empty key would let "Authorization: Bearer " with no token in */
            if (!*v) return cli_usage_error("--api-key wants a non-empty key");
            o->api_key = v;
        }
        else if (strcmp(a, "--model-name") == 0) o->model_name = v;
        else if (strcmp(a, "--chat-template") == 0) o->chat_template = v;
        else return cli_usage_error("serve: unknown option '%s' (see nextn serve --help)", a);
    }
    return 0;
}

int cmd_serve(int argc, char **argv) {
    cli_model_opts mo = {cli_default_model(), {0}};
    serve_opts o = {"127.0.0.1", NULL, NULL, NULL, NULL, NULL, NULL, CLI_MTP_DEFAULT, NX_DRAFTS_ADAPTIVE, 8080, 4, 64, 4096, 64, 1024, 8192, 0,
                     CLI_DRAFT_HEAD_BITS, CLI_DRAFT_SCREEN, 4 << 20};
    int rc = parse(argc, argv, &mo, &o);
    if (rc) return rc < 0 ? 0 : rc;
    /* a port file the server could not write is refused before the model
     * loads (minutes, for a big one), not after */
    char err[1024];
    if (o.port_file && nx_write_check(o.port_file, err, sizeof err)) return cli_fail("--port-file %s", err);

    /* SIGINT / SIGTERM are taken by sigwait below; blocked before any thread
     * starts, so every thread inherits the mask and none is interrupted */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client that hangs up is an error return, not a death */

    nx_model *m = cli_load_model(&mo);
    nx_drafter *d = NULL;
    nx_tokenizer *tok = NULL;
    nx_chat_template *tmpl = NULL;
    nx_engine *e = NULL;
    nx_server *srv = NULL;
    rc = 1;
    if (!m) goto out;
    if (o.mtp_mode != CLI_MTP_OFF && (o.mtp_mode != CLI_MTP_DEFAULT || nx_model_get_info(m)->has_mtp)) {
        nx_drafter_opts dopts = {0, 0, (int)o.head_bits, (int)o.screen};
        if (nx_drafter_load(m, o.mtp_mode == CLI_MTP_DIR ? o.mtp : NULL, &dopts, &d, err, sizeof err)) {
            cli_fail("%s", err);
            goto out;
        }
    }
    if (!(tok = cli_load_tokenizer(mo.dir))) goto out;
    if (o.chat_template || nx_tokenizer_chat_template(tok)) {
        if (!(tmpl = cli_load_chat_template(o.chat_template, tok, mo.dir))) goto out;
    }
    nx_engine_opts eo = {(int)o.parallel, (int)o.ctx, (int)o.max_queue, (int)o.chunk, (int)o.draft,
                         (size_t)o.cache_mb << 20, o.cache_dir, (size_t)o.disk_mb << 20, log_line, NULL, o.policy};
    if (nx_engine_new(m, d, &eo, &e, err, sizeof err)) {
        cli_fail("%s", err);
        goto out;
    }
    /* the directory's name: POSIX basename, which sets trailing slashes aside */
    char dir_copy[4096];
    snprintf(dir_copy, sizeof dir_copy, "%s", mo.dir);
    const char *name = o.model_name ? o.model_name : basename(dir_copy);
    /* a connection for every row and queue place, plus some for /health,
     * /metrics and the 503s beyond the queue */
    long conns = o.parallel + o.max_queue + 16;
    nx_server_opts so = {o.host,         (int)o.port, o.api_key, name, (size_t)o.max_body, (int)(conns < 4096 ? conns : 4096),
                         (int)o.ctx,     e,           tok,       tmpl, log_line,           NULL};
    if (nx_server_start(&so, &srv, err, sizeof err)) {
        cli_fail("%s", err);
        goto out;
    }
    /* the port file before the announcement: a server that cannot write it
     * exits, and must not have said it is serving first */
    if (o.port_file) {
        FILE *f = fopen(o.port_file, "w");
        if (!f || fprintf(f, "%d\n", nx_server_port(srv)) < 0 || fclose(f) != 0) {
            cli_fail("%s: cannot write the port", o.port_file);
            goto out;
        }
    }
    char line[512];
    snprintf(line, sizeof line,
             "serving %s on http://%s:%d (MTP %s, %ld parallel, context %ld, %s KV cache, prefix cache %ld MB%s%s)",
             name, o.host, nx_server_port(srv), d ? "on" : "off", o.parallel, o.ctx, nx_model_get_info(m)->kv_cache,
             o.cache_mb, o.cache_dir ? " + " : "", o.cache_dir ? o.cache_dir : "");
    log_line(NULL, line);
    int sig = 0;
    sigwait(&sigs, &sig);
    snprintf(line, sizeof line, "%s: shutting down (open streams end now)", sig == SIGINT ? "SIGINT" : "SIGTERM");
    log_line(NULL, line);
    rc = 0;
out:
    nx_server_stop(srv); /* first: its connections hold engine requests */
    nx_engine_free(e);
    nx_chat_template_free(tmpl);
    nx_tokenizer_free(tok);
    nx_drafter_free(d);
    nx_model_free(m);
    return rc;
}
