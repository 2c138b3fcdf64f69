/* bench_tokenizer.c — encode throughput next to the Hugging Face anchors.
 *
 *   bench-tokenizer [DIR]      DIR = tests/data/tokenizer (run from the repo root)
 *
 * For every case in DIR/timing-js.json (the long and big documents of the
 * golden set, looked up by id in qwen3-special.jsonl) and for a 20,000-char
 * run of one letter: time repeated encodes on one thread and take the median
 * (as the anchors did), twice: "warm" (the piece cache keeps what earlier
 * encodes of the same text stored) and "cold" (the cache is emptied before
 * every encode, so each piece is merged afresh — the figure for text the
 * tokenizer has never seen). Prints a
 * markdown table: ours, Rust `tokenizers` 0.22.2 via napi (includes the call
 * round trip) and pure JS, from timing-js.json, measured on another machine
 * (AMD EPYC, 2 cores) — an anchor, not a like-for-like race.
 * Do not run it while a build is running.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "nextn.h"
#include "tokenizer/tokenizer.h" /* nx_tok_cache_free/init: empty the cache for cold runs */

/* Median of encodes: at least 7, and enough to fill ~200 ms. cold: empty
 * the piece cache (untimed) before each encode. */
static double median_ms(nx_tokenizer *t, const char *text, size_t len, int cold, int *n_tokens) {
    char err[256];
    int32_t *ids;
    double t0 = (1e3 * nx_now_s());
    if (nx_tokenize(t, text, len, NX_SPECIAL_PARSE, &ids, n_tokens, err, sizeof err) != NX_OK) {
        fprintf(stderr, "encode: %s\n", err);
        exit(1);
    }
    nx_free(ids);
    double first = (1e3 * nx_now_s()) - t0;
    int reps = first > 0 ? (int)(200.0 / first) : 1000;
    reps = reps < 7 ? 7 : reps > 2001 ? 2001 : reps;
    double *ms = malloc((size_t)reps * sizeof *ms);
    for (int r = 0; r < reps; r++) {
        int n;
        if (cold) {
            nx_tok_cache_free(t);
            nx_tok_cache_init(t);
        }
        t0 = (1e3 * nx_now_s());
        nx_tokenize(t, text, len, NX_SPECIAL_PARSE, &ids, &n, err, sizeof err);
        ms[r] = (1e3 * nx_now_s()) - t0;
        nx_free(ids);
    }
    double med = bench_median(ms, reps);
    free(ms);
    return med;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "tests/data/tokenizer";
    char path[1024], err[512];
    nx_tokenizer *t;
    double t0 = (1e3 * nx_now_s());
    if (nx_tokenizer_load(dir, &t, err, sizeof err) != NX_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double load_ms = (1e3 * nx_now_s()) - t0;
    json_error_t je;
    snprintf(path, sizeof path, "%s/timing-js.json", dir);
    json_t *timing = json_load_file(path, 0, &je);
    if (!timing) {
        fprintf(stderr, "%s: %s\n", path, je.text);
        return 1;
    }
    /* id -> text from the golden encode file */
    json_t *texts = json_object();
    snprintf(path, sizeof path, "%s/qwen3-special.jsonl", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return 1;
    }
    json_t *line;
    while ((line = json_loadf(f, JSON_DISABLE_EOF_CHECK | JSON_ALLOW_NUL, &je))) {
        json_object_set(texts, json_string_value(json_object_get(line, "id")), json_object_get(line, "text"));
        json_decref(line);
    }
    fclose(f);

    printf("tokenizer.json loaded in %.0f ms\n\n", load_ms);
    printf("| case | bytes | tokens | ours cold ms | ours cold tok/s | ours warm ms | Rust ms | Rust tok/s | JS warm ms | cold vs Rust |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    const json_t *results = json_object_get(timing, "results");
    double worst = 1e30;
    for (size_t i = 0; i < json_array_size(results); i++) {
        const json_t *r = json_array_get(results, i);
        const char *id = json_string_value(json_object_get(r, "id"));
        const json_t *text = json_object_get(texts, id);
        if (!text) {
            printf("| %s | (text not in the golden set) |\n", id);
            continue;
        }
        int n;
        double ms = median_ms(t, json_string_value(text), json_string_length(text), 1, &n);
        double warm = median_ms(t, json_string_value(text), json_string_length(text), 0, &n);
        double rust = json_number_value(json_object_get(r, "rust_median_ms"));
        double js = json_number_value(json_object_get(r, "hfjs_warm_median_ms"));
        printf("| %s | %zu | %d | %.4f | %.0f | %.4f | %.3f | %.0f | %.3f | %.0fx |\n", id, json_string_length(text), n, ms,
               n / (ms * 1e-3), warm, rust, json_number_value(json_object_get(r, "rust_tokens_per_s")), js, rust / ms);
        if (rust / ms < worst) worst = rust / ms;
    }
    /* The brief's extra case: one letter 20,000 times (ONE pre-token piece). */
    char *run = malloc(20001);
    memset(run, 'a', 20000);
    run[20000] = 0;
    int n;
    double ms = median_ms(t, run, 20000, 1, &n), warm = median_ms(t, run, 20000, 0, &n);
    printf("| 20000 x 'a' | 20000 | %d | %.4f | %.0f | %.4f | ~20 | | | |\n", n, ms, n / (ms * 1e-3), warm);
    printf("\nslowest relative to Rust (cold): %.1fx faster\n", worst);
    free(run);
    json_decref(texts);
    json_decref(timing);
    nx_tokenizer_free(t);
    return 0;
}
