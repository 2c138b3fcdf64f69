/* server.c — the HTTP daemon of `nextn serve` (nextn.h "HTTP server").
 *
 * libmicrohttpd runs an epoll loop on a pool of SRV_THREADS threads; no
 * handler blocks: a completion waiting for tokens parks its connection
 * (complete.c). The engine thread never waits for the network, and the
 * network threads never touch the model.
 *
 * A request body arrives over several handler calls and is collected in a
 * srv_conn up to max_body bytes (beyond that: 413, the rest is discarded).
 * Routing, auth and the small GET endpoints live here; the completion
 * endpoints are in complete.c, /tokenize and /detokenize in tokenize.c. */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/err.h"
#include "server/http.h"
#include "server/oai.h"

#define SRV_THREADS 2        /* event loop threads: they only move bytes    */

/* ---- responses ------------------------------------------------------------- */

uint64_t srv_next_id(nx_server *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t id = ++s->id_counter;
    pthread_mutex_unlock(&s->mu);
    /* mixed with the start time so ids differ across restarts */
    return id * 0x9e3779b97f4a7c15ull ^ (uint64_t)time(NULL);
}

enum MHD_Result srv_queue(nx_server *s, struct MHD_Connection *c, unsigned status, struct MHD_Response *resp) {
    if (!resp) return MHD_NO;
    pthread_mutex_lock(&s->mu);
    s->http[status >= 200 && status < 600 ? status / 100 - 2 : 4]++;
    if (status < 600) s->by_code[status]++;
    pthread_mutex_unlock(&s->mu);
    enum MHD_Result r = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return r;
}

static struct MHD_Response *json_response(const char *json) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), (void *)json, MHD_RESPMEM_MUST_COPY);
    if (r) MHD_add_response_header(r, "Content-Type", "application/json");
    return r;
}

enum MHD_Result srv_send_json(nx_server *s, struct MHD_Connection *c, unsigned status, const char *json) {
    return srv_queue(s, c, status, json_response(json));
}

/* An OpenAI error response (401s with OpenAI's code invalid_api_key), or NULL. */
static struct MHD_Response *error_response(unsigned status, const char *message, const char *type, const char *param) {
    const char *code = status == 401 ? "invalid_api_key" : NULL;
    char *json = oai_error_json(message, type, param, code);
    if (!json) /* a message that is not valid UTF-8 (a decoded URL, a cut text): say less */
        json = oai_error_json(status == 404 ? "no such endpoint" : "the request could not be served", type, NULL, code);
    if (!json) return NULL;
    struct MHD_Response *r = json_response(json);
    free(json);
    if (r && status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (r && status == 503) MHD_add_response_header(r, "Retry-After", "1");
    return r;
}

enum MHD_Result srv_send_error(nx_server *s, struct MHD_Connection *c, unsigned status, const char *message,
                               const char *type, const char *param) {
    struct MHD_Response *r = error_response(status, message, type, param);
    return r ? srv_queue(s, c, status, r) : MHD_NO;
}

/* ---- GET endpoints ------------------------------------------------------------ */

/* GET /v1/models: the list of the one model; GET /v1/models/ID: that model,
 * or OpenAI's 404 when ID is not its name. */
static enum MHD_Result send_models(nx_server *s, struct MHD_Connection *c, const char *id) {
    if (id && strcmp(id, s->model_name) != 0) {
        char msg[300];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist", id);
        oai_ascii_only(msg);   /* the id may be any bytes; it goes into JSON */
        char *e = oai_error_json(msg, "invalid_request_error", "model", "model_not_found");
        if (!e) return srv_send_error(s, c, 500, "out of memory", "server_error", NULL);
        enum MHD_Result r = srv_send_json(s, c, 404, e);
        free(e);
        return r;
    }
    json_t *model = json_pack("{s:s, s:s, s:I, s:s}", "id", s->model_name, "object", "model", "created",
                              (json_int_t)time(NULL), "owned_by", "nextn");
    json_t *body = id ? model : json_pack("{s:s, s:[o]}", "object", "list", "data", model);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) return srv_send_error(s, c, 500, "out of memory", "server_error", NULL);
    enum MHD_Result r = srv_send_json(s, c, 200, text);
    free(text);
    return r;
}

/* Appends printf-formatted text to a growing buffer; the buffer stays NULL
 * after an allocation failure. */
typedef struct {
    char *p;
    size_t len, cap;
} strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
    if (!b->p && b->cap) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            free(b->p);
            b->p = NULL;
            b->cap = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
}

/* One metric: HELP, TYPE and the value. */
#define METRIC(b, name, type, help, fmt, value) \
    sb_printf(b, "# HELP nextn_" name " " help "\n# TYPE nextn_" name " " type "\nnextn_" name " " fmt "\n", value)

static enum MHD_Result send_metrics(nx_server *s, struct MHD_Connection *c) {
    nx_engine_stats e;
    nx_engine_get_stats(s->o.engine, &e);
    strbuf b = {0};
    METRIC(&b, "requests_total", "counter", "Completion requests accepted by the engine.", "%lld", (long long)e.requests);
    METRIC(&b, "requests_finished_total", "counter", "Requests that ended (any reason).", "%lld", (long long)e.finished);
    METRIC(&b, "requests_cancelled_total", "counter", "Requests cancelled (client gone, stop string, shutdown).", "%lld",
           (long long)e.cancelled);
    METRIC(&b, "requests_failed_total", "counter", "Requests that ended in an error.", "%lld", (long long)e.errors);
    METRIC(&b, "requests_rejected_total", "counter", "Requests refused because the queue was full.", "%lld",
           (long long)e.rejected);
    METRIC(&b, "prompt_tokens_total", "counter", "Prompt tokens submitted.", "%lld", (long long)e.prompt_tokens);
    METRIC(&b, "generated_tokens_total", "counter", "Tokens generated.", "%lld", (long long)e.generated_tokens);
    METRIC(&b, "decode_seconds_total", "counter", "Seconds the scheduler spent in decode rounds.", "%.6f", e.decode_s);
    METRIC(&b, "decode_tokens_per_second", "gauge", "Generated tokens per decode second since start.", "%.3f",
           e.decode_s > 0 ? (double)e.generated_tokens / e.decode_s : 0.0);
    METRIC(&b, "batch_size", "gauge", "Rows running now.", "%d", e.active);
    METRIC(&b, "batch_size_mean", "gauge", "Mean decoding rows per scheduler round.", "%.3f",
           e.sched_rounds ? (double)e.row_rounds / (double)e.sched_rounds : 0.0);
    METRIC(&b, "prefilling_rows", "gauge", "Rows reading their prompt now.", "%d", e.prefilling);
    METRIC(&b, "queue_depth", "gauge", "Requests waiting for a row.", "%d", e.queued);
    METRIC(&b, "mtp_drafted_total", "counter", "MTP draft tokens proposed.", "%lld", (long long)e.drafted);
    METRIC(&b, "mtp_accepted_total", "counter", "MTP draft tokens accepted.", "%lld", (long long)e.accepted);
    METRIC(&b, "mtp_acceptance_ratio", "gauge", "Accepted / drafted.", "%.4f",
           e.drafted ? (double)e.accepted / (double)e.drafted : 0.0);
    sb_printf(&b, "# HELP nextn_mtp_position_acceptance_ratio Acceptance of the draft at each position, given the ones before were accepted.\n"
                  "# TYPE nextn_mtp_position_acceptance_ratio gauge\n");
    for (int i = 0; i < NX_SPEC_MAX_DRAFT; i++)
        if (e.tried[i])
            sb_printf(&b, "nextn_mtp_position_acceptance_ratio{position=\"%d\"} %.4f\n", i + 1,
                      (double)e.hits[i] / (double)e.tried[i]);
    METRIC(&b, "cache_hits_total", "counter", "Prompts resumed from a prefix-cache checkpoint.", "%lld", (long long)e.cache_hits);
    METRIC(&b, "cache_misses_total", "counter", "Prompts with no usable checkpoint.", "%lld", (long long)e.cache_misses);
    METRIC(&b, "cache_hit_tokens_total", "counter", "Prompt tokens served from checkpoints.", "%lld", (long long)e.cache_hit_tokens);
    METRIC(&b, "cache_entries", "gauge", "Checkpoints indexed (RAM or disk).", "%lld", (long long)e.cache_entries);
    METRIC(&b, "cache_ram_bytes", "gauge", "Bytes of checkpoints held in RAM.", "%lld", (long long)e.cache_ram_bytes);
    METRIC(&b, "cache_disk_bytes", "gauge", "Bytes of checkpoint files.", "%lld", (long long)e.cache_disk_bytes);
    METRIC(&b, "cache_evictions_total", "counter", "Checkpoints dropped from RAM for the budget.", "%lld",
           (long long)e.cache_evictions);
    METRIC(&b, "cache_disk_evictions_total", "counter", "Checkpoint files deleted for the disk budget.", "%lld",
           (long long)e.cache_disk_evictions);
    METRIC(&b, "cache_bad_files_total", "counter", "Cache files that failed their checks (ignored, deleted).", "%lld",
           (long long)e.cache_bad_files);
    pthread_mutex_lock(&s->mu);
    sb_printf(&b, "# HELP nextn_http_responses_total HTTP responses by status code.\n# TYPE nextn_http_responses_total counter\n");
    for (int code = 100; code < 600; code++)
        if (s->by_code[code]) sb_printf(&b, "nextn_http_responses_total{code=\"%d\"} %lld\n", code, (long long)s->by_code[code]);
    sb_printf(&b, "# HELP nextn_streams_open Streaming responses open now.\n# TYPE nextn_streams_open gauge\nnextn_streams_open %lld\n",
              (long long)s->streams_open);
    pthread_mutex_unlock(&s->mu);
    if (!b.p) return srv_send_error(s, c, 500, "out of memory", "server_error", NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(b.len, b.p, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(b.p);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    return srv_queue(s, c, 200, r);
}

/* ---- routing --------------------------------------------------------------------- */

/* 1 if the request carries the API key (or none is set). The comparison
 * looks at every byte whatever matches, so its time does not reveal a prefix. */
static int authorized(const nx_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return 0;   /* the scheme's case does not matter (RFC 9110) */
    h += 7;
    size_t a = strlen(h), b = strlen(s->api_key);
    unsigned diff = a != b;
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)h[i] ^ (unsigned char)s->api_key[i < b ? i : 0];
    return diff == 0;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    nx_server *s = cls;
    srv_conn *conn = *con_cls;
    if (!conn) { /* first call: only the headers are in */
        conn = calloc(1, sizeof *conn);
        if (!conn) return MHD_NO;
        *con_cls = conn;
        /* refuse before the body is read: no key, or a declared length over the limit */
        int guarded = strncmp(url, "/v1/", 4) == 0 || strcmp(url, "/metrics") == 0 || strcmp(url, "/tokenize") == 0 ||
                      strcmp(url, "/detokenize") == 0;
        if (guarded && !authorized(s, c)) {
            conn->answered = 1;
            return srv_send_error(s, c, 401, "Incorrect API key provided (send Authorization: Bearer KEY)",
                                  "invalid_request_error", NULL);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
            char msg[128];
            snprintf(msg, sizeof msg, "request body exceeds %zu bytes", s->o.max_body);
            conn->answered = 1;
            return srv_send_error(s, c, 413, msg, "invalid_request_error", NULL);
        }
        return MHD_YES;
    }
    if (conn->answered) { /* a response is queued already: discard the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (conn->gen) return srv_complete_whole(s, c, conn); /* resumed: is the answer ready? */
    if (*upload_size) { /* a piece of the body */
        size_t n = *upload_size;
        *upload_size = 0;
        if (conn->too_big || conn->len + n > s->o.max_body) {
            conn->too_big = 1;
            return MHD_YES;
        }
        if (conn->len + n + 1 > conn->cap) {
            size_t cap = conn->cap ? conn->cap : 4096;
            while (cap < conn->len + n + 1) cap *= 2;
            char *p = realloc(conn->body, cap);
            if (!p) return MHD_NO;
            conn->body = p, conn->cap = cap;
        }
        memcpy(conn->body + conn->len, upload, n);
        conn->len += n;
        conn->body[conn->len] = 0;
        return MHD_YES;
    }
    /* HEAD is GET without the body (RFC 9110 9.3.2): load balancers and
     * uptime checks probe /health with it. MHD leaves the body out itself. */
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(url, "/health") == 0 && get) return srv_send_json(s, c, 200, "{\"status\":\"ok\"}");
    int metrics = strcmp(url, "/metrics") == 0; /* (the key was checked on the headers) */
    if (metrics && get) return send_metrics(s, c);
    if (strcmp(url, "/v1/models") == 0 && get) return send_models(s, c, NULL);
    int one_model = strncmp(url, "/v1/models/", 11) == 0 && url[11];
    if (one_model && get) return send_models(s, c, url + 11);
    int chat = strcmp(url, "/v1/chat/completions") == 0, text = strcmp(url, "/v1/completions") == 0;
    int tok = strcmp(url, "/tokenize") == 0, detok = strcmp(url, "/detokenize") == 0;
    if ((chat || text || tok || detok) && post) {
        if (conn->too_big) {
            char msg[128];
            snprintf(msg, sizeof msg, "request body exceeds %zu bytes", s->o.max_body);
            return srv_send_error(s, c, 413, msg, "invalid_request_error", NULL);
        }
        const char *body = conn->body ? conn->body : "";
        if (tok) return srv_tokenize(s, c, body, conn->len);
        if (detok) return srv_detokenize(s, c, body, conn->len);
        return srv_complete(s, c, conn, chat, body, conn->len);
    }
    if (chat || text || tok || detok || metrics || one_model || strcmp(url, "/v1/models") == 0 || strcmp(url, "/health") == 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "method %s is not allowed on %s", method, url);
        struct MHD_Response *r = error_response(405, msg, "invalid_request_error", NULL);
        if (r) MHD_add_response_header(r, "Allow", chat || text || tok || detok ? "POST" : "GET, HEAD");   /* as a 405 must */
        return r ? srv_queue(s, c, 405, r) : MHD_NO;
    }
    char msg[300];
    snprintf(msg, sizeof msg, "no such endpoint: %s %.200s", method, url);
    return srv_send_error(s, c, 404, msg, "invalid_request_error", NULL);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    srv_conn *conn = *con_cls;
    if (!conn) return;
    srv_conn_gone(conn);
    free(conn->body);
    free(conn);
    *con_cls = NULL;
}

/* ---- lifetime ---------------------------------------------------------------------- */

/* libmicrohttpd's own messages (a failed send, a connection it dropped) go
 * to the server's log like every other line, not raw to stderr. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const nx_server *s = cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    nx_logf(s->o.log, s->o.log_ctx, "http: %s", line);
}

static void free_server(nx_server *s) {
    free(s->host), free(s->api_key), free(s->model_name);
    srv_watch_destroy(s);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

nx_status nx_server_start(const nx_server_opts *opts, nx_server **out, char *err, size_t errlen) {
    *out = NULL;
    /* "" would let in "Authorization: Bearer " with no token: a key meant
     * and lost (an unset shell variable), not a server meant to be open */
    if (opts && opts->api_key && !*opts->api_key)
        return nx_fail(err, errlen, NX_EINVAL, "server: api_key is empty (NULL serves without a key)");
    if (!opts || !opts->engine || !opts->tokenizer) return nx_fail(err, errlen, NX_EINVAL, "server: an engine and a tokenizer are required");
    nx_server *s = calloc(1, sizeof *s);
    if (!s) return nx_fail(err, errlen, NX_ENOMEM, "server: out of memory");
    s->o = *opts;
    pthread_mutex_init(&s->mu, NULL);
    srv_watch_init(s);
    s->host = strdup(opts->host ? opts->host : "127.0.0.1");
    s->model_name = strdup(opts->model_name ? opts->model_name : "nextn");
    s->api_key = opts->api_key ? strdup(opts->api_key) : NULL;
    if (!s->o.max_body) s->o.max_body = 4u << 20;
    if (s->o.max_connections <= 0) s->o.max_connections = 64;
    if (!s->host || !s->model_name || (opts->api_key && !s->api_key)) {
        free_server(s);
        return nx_fail(err, errlen, NX_ENOMEM, "server: out of memory");
    }
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)opts->port);
    if (opts->port < 0 || opts->port > 65535 || inet_pton(AF_INET, s->host, &addr.sin_addr) != 1) {
        nx_status st = nx_fail(err, errlen, NX_EINVAL, "server: cannot listen on %s:%d (an IPv4 address and a port 0-65535)",
                               s->host, opts->port);
        free_server(s);
        return st;
    }
    /* the watch thread first: it must run whenever a connection can park */
    if (srv_watch_start(s) != 0) {
        free_server(s);
        return nx_fail(err, errlen, NX_ENOMEM, "server: cannot start its watch thread");
    }
    /* epoll on a pool of SRV_THREADS threads; handlers never block (a
     * generation parks its connection, complete.c) */
    s->daemon = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
                                 (uint16_t)opts->port, NULL, NULL, handle, s,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, /* first: MHD logs while reading the rest */
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_THREAD_POOL_SIZE, (unsigned)SRV_THREADS, MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)s->o.max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                                 MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        nx_status st = nx_fail(err, errlen, NX_EIO, "server: cannot listen on %s:%d (in use, or not permitted)", s->host, opts->port);
        srv_watch_stop(s);
        free_server(s);
        return st;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : opts->port;
    *out = s;
    return NX_OK;
}

int nx_server_port(const nx_server *s) { return s->port; }

void nx_server_stop(nx_server *s) {
    if (!s) return;
    /* stop accepting first; then the open streams see `closing`, cancel
     * their requests and finish; MHD_stop_daemon joins their threads */
    MHD_socket listener = MHD_quiesce_daemon(s->daemon); /* ours to close now */
    atomic_store(&s->closing, 1);
    /* MHD_stop_daemon closes every socket at once, so first let the watch
     * thread cancel every open completion (it sees `closing` within
     * GEN_WATCH_MS) and each send its last chunk and [DONE] (bounded: 30 s) */
    for (int i = 0; i < 3000; i++) {
        pthread_mutex_lock(&s->mu);
        int64_t left = s->in_flight;
        pthread_mutex_unlock(&s->mu);
        if (!left) break;
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    /* whatever is left (the wait timed out): cancelled, and no connection
     * stays parked, which MHD_stop_daemon would not survive */
    srv_release_parked(s);
    MHD_stop_daemon(s->daemon);
    srv_watch_stop(s);
    if (listener != MHD_INVALID_SOCKET) close(listener);
    free_server(s);
}
