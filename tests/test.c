/* test.c — the harness behind test.h. */
#include "test.h"

#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int nx_test_failures;

int nx_test_main(int argc, char **argv, const nx_test *tests, int n) {
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < n; i++) printf("%-48s %s\n", tests[i].name, tests[i].desc);
        return 0;
    }
    int passed = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], tests[i].name) != 0) continue;
        nx_test_failures = 0;
        tests[i].fn();
        if (nx_test_failures == 0) {
            passed++;
            printf("ok   %s — %s\n", tests[i].name, tests[i].desc);
        } else {
            failed++;
            printf("FAIL %s — %s (%d assertion%s)\n", tests[i].name, tests[i].desc,
                   nx_test_failures, nx_test_failures == 1 ? "" : "s");
        }
        fflush(stdout);
    }
    if (passed + failed == 0) {
        fprintf(stderr, "no test named %s\n", argc > 1 ? argv[1] : "(none)");
        return 2;
    }
    printf("%d passed, %d failed\n", passed, failed);
    /* A passing run leaves nothing behind (a full suite writes hundreds of MB of
     * checkpoints and captured output); a failing one keeps its files to look at. */
    if (!failed) nx_test_system("rm -rf '%s/tmp/'*'.%d'", NX_BUILD_DIR, (int)getpid());
    return failed ? 1 : 0;
}

const char *nx_test_tmpdir(const char *name) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/tmp", NX_BUILD_DIR);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/tmp/%s.%d", NX_BUILD_DIR, name, (int)getpid());
    nx_test_system("rm -rf '%s' && mkdir -p '%s'", path, path);
    return path;
}

int nx_test_nextn(const char *dir, const char *args) {
    return nx_test_system("'%s' %s > '%s/stdout' 2> '%s/stderr'", NX_NEXTN_BIN, args, dir, dir);
}

char *nx_test_captured(const char *dir, const char *which) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, which);
    char *s = nx_test_read_file(path, NULL);
    return s ? s : calloc(1, 1);
}

uint64_t nx_test_rng_next(nx_test_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}

float nx_test_rng_normal(nx_test_rng *r, float sigma) {
    double u1 = ((double)(nx_test_rng_next(r) >> 11) + 1.0) * 0x1p-53;   /* away from 0 for the log */
    double u2 = (double)(nx_test_rng_next(r) >> 11) * 0x1p-53;
    return (float)(sigma * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

int nx_test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

void *nx_test_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[len] = 0; if (n) *n = (size_t)len; }
    return buf;
}

int nx_test_system(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (st == -1) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

float *nx_test_read_npy(const char *path, long *rows, long *cols) {
    size_t n;
    unsigned char *buf = nx_test_read_file(path, &n);
    if (!buf) return NULL;
    float *out = NULL;
    if (n < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) goto done;
    size_t hl = buf[6] == 1 ? (size_t)(buf[8] | buf[9] << 8) : (size_t)(buf[8] | buf[9] << 8 | buf[10] << 16 | (size_t)buf[11] << 24);
    size_t off = (buf[6] == 1 ? 10 : 12) + hl;
    if (off > n) goto done;
    char header[1024];
    snprintf(header, sizeof header, "%.*s", (int)(hl < 1000 ? hl : 1000), (char *)buf + (buf[6] == 1 ? 10 : 12));
    if (!strstr(header, "'<f4'") || strstr(header, "'fortran_order': True")) goto done;
    char *shape = strstr(header, "'shape': (");
    if (!shape) goto done;
    long dims[3] = {1, 1, 1};
    int nd = sscanf(shape, "'shape': (%ld, %ld, %ld", &dims[0], &dims[1], &dims[2]);
    if (nd < 1) goto done;
    long r = nd == 1 ? 1 : dims[0] * (nd == 3 ? dims[1] : 1), c = nd == 1 ? dims[0] : dims[nd - 1];
    if ((size_t)(r * c) * 4 != n - off) goto done;
    out = malloc((size_t)(r * c) * 4);
    if (out) memcpy(out, buf + off, (size_t)(r * c) * 4);
    *rows = r;
    *cols = c;
done:
    free(buf);
    return out;
}

int *nx_test_read_ids(const char *path, int *n) {
    char *text = nx_test_read_file(path, NULL);
    if (!text) return NULL;
    int cap = 16, k = 0;
    int *ids = malloc((size_t)cap * sizeof *ids);
    for (char *p = text; *p;) {
        if (*p == '#') break;
        if (*p >= '0' && *p <= '9') {
            if (k == cap) ids = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            ids[k++] = (int)strtol(p, &p, 10);
        } else {
            p++;
        }
    }
    free(text);
    *n = k;
    return ids;
}

nx_test_diff nx_test_compare(const float *a, const float *ref, long n) {
    nx_test_diff d = {0, 0};
    double se = 0, ss = 0;
    for (long i = 0; i < n; i++) {
        double e = (double)a[i] - ref[i];
        if (fabs(e) > d.max_abs || e != e) d.max_abs = e != e ? INFINITY : fabs(e);
        se += e * e;
        ss += (double)ref[i] * ref[i];
    }
    d.nmse = ss > 0 ? se / ss : se;
    return d;
}

long nx_test_argmax(const float *v, long n) {
    long best = 0;
    for (long i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

nx_model *nx_test_model(const char *dir, int threads) {
    char err[512];
    nx_model *m = NULL;
    nx_load_opts o = {.n_threads = threads};
    nx_status st = nx_model_load(dir, &o, &m, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    return m;
}

nx_drafter *nx_test_drafter(nx_model *m, int prenorm) {
    char err[512];
    nx_drafter *d = NULL;
    nx_drafter_opts o = {.hidden_prenorm = prenorm};
    nx_status st = nx_drafter_load(m, NULL, &o, &d, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    return d;
}

const char *nx_test_fixture(const char *name, const char *args) {
    static char dirs[8][1024];
    static int next;
    char *dir = dirs[next++ % 8];
    snprintf(dir, sizeof dirs[0], "%s", nx_test_tmpdir(name));
    int rc = nx_test_system("'%s' --out '%s' %s > /dev/null", NX_FIXTURE_BIN, dir, args);
    CHECKF(rc == 0, "nextn-fixture %s failed", args);
    return dir;
}

float *nx_test_logits(nx_model *m, const int32_t *seq, int n) {
    char err[512];
    long V = nx_model_get_info(m)->vocab_size;
    nx_state *s = NULL;
    CHECK(nx_state_new(m, n, &s, err, sizeof err) == NX_OK);
    float *logits = calloc((size_t)n * V, sizeof *logits);
    nx_forward_out fo = {.logits = logits, .all_rows = 1};
    nx_status st = s ? nx_forward(m, s, seq, n, &fo, err, sizeof err) : NX_ESTATE;
    CHECKF(st == NX_OK, "%s", err);
    nx_state_free(s);
    return logits;
}

int nx_test_generate(nx_model *m, nx_drafter *d, const nx_spec_opts *o, const int32_t *prompt, int n_prompt, int n_gen,
                     int32_t *out, nx_spec_stats *stats) {
    char err[512];
    nx_spec *s = NULL;
    if (stats) memset(stats, 0, sizeof *stats);
    nx_status st = nx_spec_new(m, d, n_prompt + n_gen + 1, o, &s, err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    if (st) return 0;
    st = nx_spec_prefill(s, prompt, n_prompt, &out[0], err, sizeof err);
    CHECKF(st == NX_OK, "%s", err);
    int n = st ? 0 : 1, stopped = 0;
    for (int i = 0; i < o->n_stop && n; i++) stopped |= out[0] == o->stop_ids[i];
    while (!st && n < n_gen && !stopped) {
        int got;
        st = nx_spec_step(s, n_gen - n, out + n, &got, err, sizeof err);
        CHECKF(st == NX_OK, "%s", err);
        for (int i = 0; i < got && !stopped; i++)
            for (int k = 0; k < o->n_stop; k++) stopped |= out[n + i] == o->stop_ids[k];
        n += got;
    }
    if (stats) *stats = *nx_spec_get_stats(s);
    nx_spec_free(s);
    return n;
}

int nx_test_same_logprobs(const nx_token_logprob *a, const nx_token_logprob *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i].id != b[i].id || memcmp(&a[i].logprob, &b[i].logprob, sizeof(float)) || a[i].n_top != b[i].n_top ||
            memcmp(a[i].top_id, b[i].top_id, (size_t)a[i].n_top * sizeof(int32_t)) ||
            memcmp(a[i].top_logprob, b[i].top_logprob, (size_t)a[i].n_top * sizeof(float)))
            return 0;
    return 1;
}

void nx_test_tokens(int32_t *t, int n, int vocab, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (int32_t)((seed >> 8) % (unsigned)vocab);
    }
}
