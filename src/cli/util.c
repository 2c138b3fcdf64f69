/* util.c — argument parsing, .npy output and timing for the CLI. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void report(const char *fmt, va_list ap) {
    fputs("nextn: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(fmt, ap);
    va_end(ap);
    return 2;
}

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(fmt, ap);
    va_end(ap);
    return 1;
}

/* 1 if s starts as a plain number does: strtol and friends also take
 * leading white space and a '+', and strtoull a '-' (which wraps). */
static int plain_start(const char *s, int sign_ok) {
    return s && (isdigit((unsigned char)*s) || *s == '.' || (sign_ok && *s == '-' && s[1]));
}

int cli_parse_int(const char *s, long lo, long hi, long *out) {
    if (!plain_start(s, 1)) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_head_bits(const char *s, long *out) {
    long b;
    if (s && strcmp(s, "auto") == 0) {
        *out = NX_DRAFT_HEAD_AUTO;
        return 0;
    }
    if (cli_parse_int(s, 0, 8, &b) || b == 1 || b == 7) return -1;
    *out = b;
    return 0;
}

int cli_parse_screen(const char *s, long *out) {
    if (s && (strcmp(s, "auto") == 0 || strcmp(s, "off") == 0)) {
        *out = strcmp(s, "auto") == 0 ? NX_DRAFT_SCREEN_AUTO : 0;
        return 0;
    }
    return cli_parse_int(s, 0, 1 << 30, out);
}

int cli_sampling_option(const char *a, const char *v, nx_sampling *sp) {
    static const struct { const char *name; double lo, hi; size_t off; } fl[] = {
        {"--temp", 0, 100, offsetof(nx_sampling, temperature)},
        {"--top-p", 0, 1, offsetof(nx_sampling, top_p)},
        {"--min-p", 0, 1, offsetof(nx_sampling, min_p)},
        {"--repeat-penalty", 0.01, 100, offsetof(nx_sampling, repetition_penalty)},
        {"--presence-penalty", -100, 100, offsetof(nx_sampling, presence_penalty)},
        {"--frequency-penalty", -100, 100, offsetof(nx_sampling, frequency_penalty)},
    };
    const size_t n_fl = sizeof fl / sizeof *fl;
    size_t f = 0;
    while (f < n_fl && strcmp(a, fl[f].name) != 0) f++;
    const int top_k = strcmp(a, "--top-k") == 0, seed = strcmp(a, "--seed") == 0;
    if (f == n_fl && !top_k && !seed) return 0;
    if (!v) return cli_usage_error("%s needs a value", a), -1;
    long k;
    double d;
    if (top_k) {
        if (cli_parse_int(v, 0, 1 << 24, &k)) return cli_usage_error("--top-k wants an integer >= 0, got '%s'", v), -1;
        sp->top_k = (int)k;
    } else if (seed) {
        /* a negative S is the same 64 bits as 2^64 + S, as the server's
         * "seed" field takes it and as bench --json writes a seed past 2^63 */
        long neg;
        if (cli_parse_u64(v, &sp->seed) == 0) return 1;
        if (cli_parse_int(v, LONG_MIN, -1, &neg)) return cli_usage_error("--seed wants an integer, got '%s'", v), -1;
        sp->seed = (uint64_t)neg;
    } else {
        if (cli_parse_float(v, fl[f].lo, fl[f].hi, &d))
            return cli_usage_error("%s wants a number in [%g, %g], got '%s'", a, fl[f].lo, fl[f].hi, v), -1;
        *(float *)((char *)sp + fl[f].off) = (float)d;
    }
    return 1;
}

int cli_parse_draft_pick(const char *v, nx_draft_pick *out) {
    if (strcmp(v, "argmax") == 0) *out = NX_DRAFT_PICK_ARGMAX;
    else if (strcmp(v, "sample") == 0) *out = NX_DRAFT_PICK_SAMPLE;
    else return cli_usage_error("--draft-pick wants argmax or sample, got '%s'", v), -1;
    return 0;
}

int cli_parse_mtp(const char *v, cli_mtp *out) {
    struct stat st;
    if (!v) *out = CLI_MTP_DEFAULT;
    else if (strcmp(v, "on") == 0) *out = CLI_MTP_ON;
    else if (strcmp(v, "off") == 0) *out = CLI_MTP_OFF;
    else if (stat(v, &st) == 0 && S_ISDIR(st.st_mode)) *out = CLI_MTP_DIR;
    else return cli_usage_error("--mtp wants on, off or a drafter directory, got '%s'", v), -1;
    return 0;
}

int cli_parse_u64(const char *s, uint64_t *out) {
    if (!plain_start(s, 0)) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

int cli_parse_float(const char *s, double lo, double hi, double *out) {
    if (!plain_start(s, 1)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_list(const char *s, int (*item)(char *item, void *ctx), void *ctx) {
    char *copy = s && *s ? strdup(s) : NULL;
    int bad = !copy;
    /* by hand, not strtok: strtok skips empty items, so "1,,2" and "1,"
     * would read as "1,2" and "1" */
    for (char *p = copy, *comma = NULL; !bad; p = comma + 1) {
        if ((comma = strchr(p, ','))) *comma = '\0';
        bad = !*p || item(p, ctx) != 0;
        if (!comma) break;
    }
    free(copy);
    return bad ? -1 : 0;
}

typedef struct {
    int32_t *v;
    int k;
} ids_list;

static int parse_id(char *tok, void *ctx) {
    ids_list *l = ctx;
    long x;
    while (*tok == ' ') tok++;
    if (cli_parse_int(tok, 0, INT32_MAX, &x)) return -1;
    l->v[l->k++] = (int32_t)x;
    return 0;
}

int cli_parse_ids(const char *s, int32_t **ids, int *n) {
    *ids = NULL;
    *n = 0;
    if (!s || !*s) return -1;
    int cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    ids_list l = {malloc((size_t)cap * sizeof *l.v), 0};
    if (!l.v || cli_parse_list(s, parse_id, &l)) {
        free(l.v);
        return -1;
    }
    *ids = l.v;
    *n = l.k;
    return 0;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {   /* the last word: an option without its value, an unknown one, or a stray word */
        if (argv[*i][0] != '-') cli_usage_error("unexpected argument '%s' (see --help)", argv[*i]);
        else cli_usage_error("option %s needs a value, or is not an option of this command (see --help)", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

const char *cli_default_model(void) {
    const char *env = getenv("NEXTN_MODEL");
    return env && *env ? env : NEXTN_DEFAULT_MODEL;
}

int cli_write_npy(const char *path, const float *data, int64_t rows, int64_t cols) {
    char header[128];
    int len = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                       (long long)rows, (long long)cols);
    /* magic(6) + version(2) + header length(2) + header, padded with spaces
     * and a final newline to a multiple of 64 bytes (npy format 1.0). */
    int total = 10 + len + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    uint16_t hl = (uint16_t)(len + pad + 1);
    pre[8] = (unsigned char)(hl & 0xff);
    pre[9] = (unsigned char)(hl >> 8);
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, (size_t)len, f) == (size_t)len;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && fwrite(data, sizeof(float), (size_t)(rows * cols), f) == (size_t)(rows * cols);
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_model_option(int argc, char **argv, int *i, cli_model_opts *o) {
    const char *a = argv[*i];
    if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
        if (!(o->dir = cli_value(argc, argv, i))) return -1;
        if (!*o->dir) {
            cli_usage_error("%s wants a checkpoint directory, got ''", a);
            return -1;
        }
        return 1;
    }
    if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
        const char *v = cli_value(argc, argv, i);
        long n;
        if (!v) return -1;
        if (cli_parse_int(v, 1, 256, &n)) {
            cli_usage_error("--threads wants an integer in [1, 256], got '%s'", v);
            return -1;
        }
        o->load.n_threads = (int)n;
        return 1;
    }
    if (strcmp(a, "--ref") == 0) {
        o->load.force_reference = 1;
        return 1;
    }
    if (strcmp(a, "--kernels") == 0) {
        const char *v = cli_value(argc, argv, i);
        if (!v) return -1;
        if (nx_kernels_parse(v, &o->load.kernels)) {
            cli_usage_error("--kernels wants auto, avx512vnni, avxvnni, avx2 or scalar, got '%s'", v);
            return -1;
        }
        return 1;
    }
    if (strcmp(a, "--f32-activations") == 0) {
        o->load.f32_activations = 1;
        return 1;
    }
    if (strcmp(a, "--kv-cache") == 0) {
        const char *v = cli_value(argc, argv, i);
        if (!v) return -1;
        if (nx_kv_cache_parse(v, &o->load.kv_cache)) {
            cli_usage_error("--kv-cache wants f32 or f16, got '%s'", v);
            return -1;
        }
        return 1;
    }
    return 0;
}

nx_model *cli_load_model(const cli_model_opts *o) {
    char err[1024];
    nx_model *m = NULL;
    const char *dir = o->dir ? o->dir : cli_default_model();
    if (nx_model_load(dir, &o->load, &m, err, sizeof err) != NX_OK) {
        cli_fail("%s", err);
        return NULL;
    }
    return m;
}

char *cli_read_file(const char *path, size_t *len) {
    const int std_in = strcmp(path, "-") == 0;
    FILE *f = std_in ? stdin : fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            char *g = realloc(buf, cap = cap * 2 + 65536);
            if (!g) { free(buf); if (!std_in) fclose(f); return NULL; }
            buf = g;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    if (!std_in) fclose(f);
    if (bad) { free(buf); return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

const char *cli_source_name(const char *path) { return strcmp(path, "-") == 0 ? "standard input" : path; }

int cli_check_utf8(const char *source, const char *text, size_t len) {
    const size_t bad = nx_utf8_check(text, len);
    return bad < len ? cli_fail("%s: invalid UTF-8 at byte %zu", source, bad) : 0;
}

nx_tokenizer *cli_load_tokenizer(const char *dir) {
    char err[1024];
    nx_tokenizer *t = NULL;
    if (nx_tokenizer_load(dir ? dir : cli_default_model(), &t, err, sizeof err) != NX_OK) {
        cli_fail("%s", err);
        return NULL;
    }
    return t;
}

nx_chat_template *cli_load_chat_template(const char *file, const nx_tokenizer *tok, const char *dir) {
    char err[1024];
    nx_chat_template *c = NULL;
    size_t len = 0;
    char *owned = NULL;
    const char *text, *name;
    if (file) {
        if (!(owned = cli_read_file(file, &len))) {
            cli_fail("%s: cannot read the chat template", file);
            return NULL;
        }
        text = owned;
        name = file;
    } else {
        text = tok ? nx_tokenizer_chat_template(tok) : NULL;
        name = dir ? dir : cli_default_model();
        if (!text) {
            cli_fail("%s: the tokenizer files have no chat_template; pass --chat-template FILE (see docs/chat-templates.md)", name);
            return NULL;
        }
        len = strlen(text);
    }
    if (nx_chat_template_new(text, len, name, &c, err, sizeof err) != NX_OK) cli_fail("%s", err);
    free(owned);
    return c;
}

void cli_json_string(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (ch < 0x20) fprintf(f, "\\u%04x", ch);
            else fputc(ch, f);
        }
    }
    fputc('"', f);
}
