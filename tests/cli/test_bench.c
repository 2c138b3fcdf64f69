/* test_bench.c — `nextn bench` end to end: the JSON report has every key the
 * issue names with sane values, a model without an MTP head reports its MTP
 * figures as null, bad options exit 2 with one line, and
 * nx_model_info.decode_bytes counts the main stack once (tied and untied,
 * HF and MLX layouts, the MTP head left out) and the state figures follow
 * from the shape; the host steal reader (cli/host_steal.c, compiled in)
 * parses /proc/stat's lines and refuses malformed ones.
 *
 * Runs are kept short (--prompt 32 --gen 16 --repeat 1) because the suite also
 * runs under AddressSanitizer; the figures are only checked for sanity. */
#include "test.h"

#include <jansson.h>

#include "cli/host_steal.h"

static char out_dir[1024];

/* `nextn ARGS` with its output captured into out_dir (test.h). */
static int nextn(const char *args) { return nx_test_nextn(out_dir, args); }
static char *captured(const char *which) { return nx_test_captured(out_dir, which); }

/* Runs a bench that must succeed and print one JSON object; NULL (and a
 * failed CHECK) otherwise. */
static json_t *bench_json(const char *args) {
    int rc = nextn(args);
    char *out = captured("stdout"), *err = captured("stderr");
    json_t *j = rc == 0 ? json_loads(out, 0, NULL) : NULL;
    CHECKF(rc == 0 && j != NULL, "nextn %s -> %d, stdout '%s', stderr '%s'", args, rc, out, err);
    free(out);
    free(err);
    return j;
}

static double num(const json_t *j, const char *key) {
    const json_t *v = json_object_get(j, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

static void bench_json_reports_every_figure(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("bench-json"));
    json_t *j = bench_json("bench -t 2 --prompt 32 --gen 16 --repeat 1 --json");
    if (!j) return;
    CHECK(num(j, "threads") == 2 && num(j, "prompt_tokens") == 32 && num(j, "gen_tokens") == 16 && num(j, "repeat") == 1);
    CHECK(json_is_string(json_object_get(j, "model")));
    const json_t *kv = json_object_get(j, "kv_cache");
    CHECK(json_is_string(kv) && strcmp(json_string_value(kv), "f32") == 0);
    CHECK(num(j, "load_s") >= 0);
    static const char *const rates[] = {"prefill_tok_s", "decode_tok_s", "mtp_decode_tok_s", "bandwidth_gbs", "fma_gflops",
                                        "roofline_tok_s", "roofline_pct", "decode_bytes"};
    for (size_t i = 0; i < sizeof rates / sizeof *rates; i++)
        CHECKF(num(j, rates[i]) > 0 && isfinite(num(j, rates[i])), "%s = %g", rates[i], num(j, rates[i]));
    static const char *const ranges[] = {"prefill_tok_s", "decode_tok_s", "mtp_decode_tok_s", "bandwidth_gbs"};
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s_range", ranges[i]);
        const json_t *r = json_object_get(j, key);
        double lo = num(r, "min"), med = num(r, "median"), hi = num(r, "max");
        CHECKF(lo > 0 && lo <= med && med <= hi && med == num(j, ranges[i]), "%s: %g %g %g", key, lo, med, hi);
    }
    /* the bundled model has a head: acceptance is a fraction, one per draft position */
    double acc = num(j, "acceptance");
    CHECKF(acc >= 0 && acc <= 1, "acceptance %g", acc);
    const json_t *per = json_object_get(j, "per_position");
    CHECK(json_array_size(per) == (size_t)num(j, "draft") && json_array_size(per) >= 1);
    for (size_t i = 0; i < json_array_size(per); i++) {
        double p = json_number_value(json_array_get(per, i));
        CHECKF(p >= 0 && p <= 1, "per_position[%zu] = %g", i, p);
    }
    CHECK(num(j, "tokens_per_forward") >= 1);
    /* one repeat: the paired speed-up is that repeat's MTP rate over its plain
     * rate, and the roofline share its decode over its own bandwidth probe */
    double sp = num(j, "mtp_speedup"), ratio = num(j, "mtp_decode_tok_s") / num(j, "decode_tok_s");
    CHECKF(sp > 0 && fabs(sp - ratio) <= 1e-4 * ratio, "mtp_speedup %g, rates give %g", sp, ratio);
    double pct = num(j, "roofline_pct");
    double want = 100.0 * num(j, "decode_tok_s") * num(j, "decode_bytes") / 1e9 / num(j, "bandwidth_gbs");
    CHECKF(fabs(pct - want) <= 1e-4 * want, "roofline_pct %g, decode / bandwidth give %g", pct, want);
    double bw = num(j, "bandwidth_gbs");
    /* the probe reads at least 256 MiB and at least a step's weights (this
     * model's are far fewer), alternating its two loops where AVX2 runs */
    const double buf = num(j, "bandwidth_buffer_bytes");
    CHECKF(buf >= 256.0 * 1024 * 1024 - 2 * 4096 && buf >= num(j, "decode_bytes"), "bandwidth_buffer_bytes %g", buf);
    const json_t *impl = json_object_get(j, "probe_impl");
    CHECKF(json_is_string(impl) && (strcmp(json_string_value(impl), "avx2, plain and prefetched") == 0 ||
                                    strcmp(json_string_value(impl), "scalar") == 0),
           "probe_impl %s", json_is_string(impl) ? json_string_value(impl) : "(not a string)");
    CHECKF(fabs(num(j, "roofline_tok_s") * num(j, "decode_bytes") / 1e9 - bw) <= 1e-4 * bw, "roofline_tok_s %g",
           num(j, "roofline_tok_s"));
    /* with the state: the decode's 16 steps attend to 33 .. 48 positions */
    double moved = num(j, "decode_bytes") + num(j, "state_bytes") + num(j, "kv_bytes_per_pos") * (32 + 17 / 2.0);
    CHECKF(num(j, "state_bytes") > 0 && num(j, "kv_bytes_per_pos") > 0 && fabs(num(j, "moved_bytes") - moved) <= 1,
           "moved_bytes %g, want %g", num(j, "moved_bytes"), moved);
    double mpct = num(j, "moved_roofline_pct"), mwant = 100.0 * num(j, "decode_tok_s") * moved / 1e9 / bw;
    CHECKF(fabs(mpct - mwant) <= 1e-4 * mwant && mpct > pct, "moved_roofline_pct %g, want %g", mpct, mwant);
    CHECK(json_is_true(json_object_get(j, "mtp_output_matches")) && json_is_null(json_object_get(j, "sampling")));
    /* an MTP round's parts, and its verify against the plain step */
    const json_t *rms = json_object_get(j, "mtp_round_ms");
    CHECKF(num(rms, "draft") > 0 && num(rms, "verify") > 0 && num(rms, "commit") > 0, "mtp_round_ms %g %g %g",
           num(rms, "draft"), num(rms, "verify"), num(rms, "commit"));
    double vc = num(j, "mtp_verify_cost"), vwant = num(rms, "verify") / 1e3 * num(j, "decode_tok_s");
    CHECKF(vc > 0 && fabs(vc - vwant) <= 1e-4 * vwant, "mtp_verify_cost %g, want %g", vc, vwant);
    CHECK(json_is_null(json_object_get(j, "mtp_skipped")));
    /* auto: the bundled model's head fits a cache, so no draft copy */
    CHECK(json_is_null(json_object_get(j, "draft_head_bits")) && json_is_null(json_object_get(j, "draft_screen")));
    const json_t *cost = json_object_get(j, "verify_cost"), *vs = json_object_get(j, "verify_s");
    for (int T = 1; T <= 8; T++) {
        char key[8];
        snprintf(key, sizeof key, "%d", T);
        CHECKF(num(vs, key) > 0, "verify_s[%d]", T);
        if (T > 1) CHECKF(num(cost, key) > 0, "verify_cost[%d] = %g", T, num(cost, key));
    }
    CHECK(json_object_get(cost, "1") == NULL && json_object_get(cost, "9") == NULL);
    /* the host's steal: a share, over the repeat and over the verify costs
     * (Linux, where CI runs, has the counters) */
    const json_t *sr = json_object_get(j, "steal_pct_range");
    double steal = num(j, "steal_pct"), vsteal = num(j, "verify_steal_pct");
    CHECKF(steal >= 0 && steal <= 100 && num(sr, "median") == steal && num(sr, "min") <= steal && steal <= num(sr, "max"),
           "steal_pct %g", steal);
    CHECKF(vsteal >= 0 && vsteal <= 100, "verify_steal_pct %g", vsteal);
    json_decref(j);
}

/* Over several repeats the roofline shares are medians of per-repeat
 * ratios: the share with the state's bytes is the weights' share scaled by
 * the bytes (a median commutes with scaling), whatever order the repeats'
 * rates came in; a --draft-vocab past the vocabulary drafts over all of
 * it, so the report says so (null), not the number asked for; and greedy
 * decoding with a penalty reports its options (not null: not the argmax of
 * the raw logits) and still matches plain output. */
static void bench_over_repeats_reports_what_it_ran(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("bench-repeats"));
    json_t *j = bench_json("bench -t 2 --prompt 16 --gen 8 --repeat 3 --draft-vocab 99999999 --repeat-penalty 1.3 --json");
    if (!j) return;
    double pct = num(j, "roofline_pct"), mpct = num(j, "moved_roofline_pct");
    double mwant = pct * num(j, "moved_bytes") / num(j, "decode_bytes");
    CHECKF(pct > 0 && fabs(mpct - mwant) <= 1e-4 * mwant, "moved_roofline_pct %g, roofline_pct scaled %g", mpct, mwant);
    CHECKF(json_is_null(json_object_get(j, "draft_vocab")), "draft_vocab %g", num(j, "draft_vocab"));
    const json_t *sp = json_object_get(j, "sampling");
    CHECKF(num(sp, "temperature") == 0 && fabs(num(sp, "repetition_penalty") - 1.3) < 1e-6 &&
               num(sp, "presence_penalty") == 0 && num(sp, "frequency_penalty") == 0,
           "sampling: temperature %g repetition_penalty %g", num(sp, "temperature"), num(sp, "repetition_penalty"));
    CHECK(json_is_true(json_object_get(j, "mtp_output_matches")));
    json_decref(j);
}

/* Sampling options: both sessions sample, the MTP one by rejection sampling
 * with the drafts asked for; the settings are reported, and the output
 * match is null (another sample, not plain's). */
static void bench_samples_when_asked(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("bench-sampled"));
    json_t *j = bench_json("bench -t 2 --prompt 16 --gen 32 --repeat 1 --temp 0.7 --top-k 20 --top-p 0.8 --seed 3 "
                           "--draft-pick argmax --json");
    if (!j) return;
    const json_t *sp = json_object_get(j, "sampling");
    CHECKF(fabs(num(sp, "temperature") - 0.7) < 1e-6 && num(sp, "top_k") == 20 && fabs(num(sp, "top_p") - 0.8) < 1e-6 &&
               num(sp, "min_p") == 0 && num(sp, "seed") == 3 && num(sp, "repetition_penalty") == 1 &&
               num(sp, "presence_penalty") == 0 && num(sp, "frequency_penalty") == 0 &&
               strcmp(json_string_value(json_object_get(sp, "draft_pick")), "argmax") == 0,
           "sampling: temperature %g top_k %g top_p %g", num(sp, "temperature"), num(sp, "top_k"), num(sp, "top_p"));
    CHECK(json_is_null(json_object_get(j, "mtp_output_matches")));
    CHECK(num(j, "decode_tok_s") > 0 && num(j, "mtp_decode_tok_s") > 0 && num(j, "acceptance") >= 0);
    json_decref(j);
}

static void bench_without_a_head_reports_mtp_as_null(void) {
    const char *dir = nx_test_fixture("bench-nomtp", "--preset tiny --no-mtp");
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("bench-nomtp-run"));
    char args[2048];
    snprintf(args, sizeof args, "bench -m '%s' -t 1 --prompt 8 --gen 4 --repeat 1 --json", dir);
    json_t *j = bench_json(args);
    if (j) {
        CHECK(num(j, "decode_tok_s") > 0 && num(j, "roofline_pct") > 0);
        static const char *const nulls[] = {"mtp_decode_tok_s", "mtp_decode_tok_s_range", "mtp_speedup",
                                            "mtp_roofline_pct", "acceptance", "per_position",
                                            "tokens_per_forward", "mtp_output_matches", "mtp_round_ms",
                                            "mtp_verify_cost"};
        for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++) CHECKF(json_is_null(json_object_get(j, nulls[i])), "%s", nulls[i]);
        CHECK(strstr(json_string_value(json_object_get(j, "mtp_skipped")), "no MTP head") != NULL);
        json_decref(j);
    }
    /* the table says so in words */
    snprintf(args, sizeof args, "bench -m '%s' -t 1 --prompt 8 --gen 4 --repeat 1", dir);
    CHECK(nextn(args) == 0);
    char *out = captured("stdout");
    CHECKF(strstr(out, "skipped: the checkpoint has no MTP head") && strstr(out, "roofline") && strstr(out, "prefill") &&
               strstr(out, "verify cost") && strstr(out, "GB/s") && strstr(out, "host steal"),
           "%s", out);
    free(out);
    /* --mtp on asks for the checkpoint's head: its absence is an error, as
     * for generate, not a skipped measurement */
    snprintf(args, sizeof args, "bench -m '%s' -t 1 --prompt 8 --gen 4 --repeat 1 --mtp on", dir);
    CHECK(nextn(args) == 1);
    char *err = captured("stderr");
    CHECKF(strstr(err, dir) != NULL, "%s", err);
    free(err);
    /* the table names penalties under greedy decoding too */
    snprintf(args, sizeof args, "bench -m '%s' -t 1 --prompt 8 --gen 4 --repeat 1 --repeat-penalty 1.3", dir);
    CHECK(nextn(args) == 0);
    out = captured("stdout");
    CHECKF(strstr(out, "penalties      repetition 1.3, presence 0, frequency 0; greedy") != NULL, "%s", out);
    free(out);
}

static void host_steal_reads_proc_stat_lines(void) {
    host_ticks a, b;
    /* user nice system idle iowait irq softirq steal guest guest_nice */
    CHECK(host_ticks_parse("cpu  100 5 20 9000 7 3 2 40 11 0\ncpu0 50 2 10 4500 3 1 1 20 5 0\n", &a) == 0 && a.ok);
    CHECKF(a.busy == 100 + 5 + 20 + 3 + 2 && a.steal == 40, "busy %llu steal %llu", (unsigned long long)a.busy,
           (unsigned long long)a.steal);
    /* the aggregate line wherever it is; no guest columns is fine */
    CHECK(host_ticks_parse("intr 5\ncpu  130 5 20 9100 7 3 2 50\n", &b) == 0 && b.ok);
    double pct = host_steal_pct(&a, &b);   /* 30 busy, 10 stolen */
    CHECKF(fabs(pct - 25.0) < 1e-12, "steal %g%%", pct);
    CHECK(isnan(host_steal_pct(&b, &a)));   /* counters going backwards */
    CHECK(isnan(host_steal_pct(&a, &a)));   /* nothing ran */
    /* no steal column (kernels before 2.6.11), no aggregate line, garbage */
    static const char *const bad[] = {"cpu  100 5 20 9000 7 3 2\n", "cpu0 1 2 3 4 5 6 7 8\n", "cpu  1 2 x 4 5 6 7 8\n", "",
                                      "cpu  1 2 3 4 5 6 7 -8\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECKF(host_ticks_parse(bad[i], &b) == -1 && !b.ok, "'%s'", bad[i]);
        CHECK(isnan(host_steal_pct(&a, &b)) && isnan(host_steal_pct(&b, &a)));
    }
    /* this machine's own file gives a reading (Linux) */
    host_ticks_read(&b);
    CHECK(b.ok && b.busy >= a.busy);
}

static void bad_bench_options_exit_2_with_one_line(void) {
    snprintf(out_dir, sizeof out_dir, "%s", nx_test_tmpdir("bench-usage"));
    static const struct { const char *args; const char *needle; } cases[] = {
        {"bench --prompt 0", "--prompt"},
        {"bench --gen -1", "--gen"},
        {"bench --repeat 0", "--repeat"},
        {"bench --repeat many", "--repeat"},
        {"bench --draft 0", "--draft"},
        {"bench --draft-head-bits 7", "--draft-head-bits"},
        {"bench --draft-head-bits 1", "--draft-head-bits"},
        {"bench --draft-screen -1", "--draft-screen"},
        {"bench --frobnicate", "unknown option '--frobnicate'"},
        {"bench --temp hot", "--temp"},
        {"bench --top-k", "needs a value"},
        {"bench --draft-pick best", "--draft-pick"},
        {"bench --prompt", "needs a value"},
        {"bench -t 0", "--threads"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = nextn(cases[i].args);
        char *err = captured("stderr");
        int lines = 0;
        for (char *p = err; *p; p++) lines += *p == '\n';
        CHECKF(rc == 2 && lines == 1 && strstr(err, cases[i].needle), "nextn %s -> %d, stderr '%s'", cases[i].args, rc, err);
        free(err);
    }
    CHECK(nextn("bench --help") == 0);
    char *out = captured("stdout");
    CHECK(strstr(out, "usage: nextn bench") != NULL);
    free(out);
    /* a missing checkpoint is a runtime failure naming it */
    CHECK(nextn("bench -m /nonexistent/model --prompt 4 --gen 2 --repeat 1") == 1);
    char *err = captured("stderr");
    CHECKF(strstr(err, "/nonexistent/model") != NULL, "%s", err);
    free(err);
}

/* With every tensor F32, decode_bytes is 4 bytes per main-stack parameter
 * (n_params counts the LM head once), an untied embedding counting one row
 * instead of V, and nothing of the MTP head (which every fixture here has);
 * state_bytes and kv_bytes_per_pos follow from the shape. */
static void decode_bytes_counts_the_main_stack_once(void) {
    static const struct { const char *args; int tied; } cases[] = {
        {"--preset tiny --dtype f32 --tie", 1},
        {"--preset tiny --dtype f32 --no-tie", 0},
        {"--preset tiny --dtype f32 --no-tie --layout mlx --mtp-layout mlx-inline", 0},
        {"--preset tiny --dtype f32 --tie --layout mlx --mtp-layout mlx-inline", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nx_model *m = nx_test_model(nx_test_fixture("bench-bytes", cases[i].args), 1);
        if (!m) continue;
        const nx_model_info *in = nx_model_get_info(m);
        int64_t V = in->vocab_size, H = in->hidden_size;
        int64_t want = 4 * (in->n_params + H - (cases[i].tied ? 0 : V * H));
        CHECKF(in->has_mtp && in->tie_word_embeddings == cases[i].tied, "%s", cases[i].args);
        CHECKF(in->decode_bytes == want, "%s: decode_bytes %lld, want %lld", cases[i].args, (long long)in->decode_bytes,
               (long long)want);
        CHECK(in->decode_bytes < in->weight_bytes);
        /* the state a step moves: GDN recurrent [Hv][Dv][Dk] and conv
         * [Kc-1][2 Hk Dk + Hv Dv] state read and written, K and V of each
         * attention layer read per position, all f32 */
        int64_t rec = (int64_t)in->linear_v_heads * in->linear_v_dim * in->linear_k_dim,
                conv = (int64_t)(in->conv_kernel - 1) *
                       (2 * in->linear_k_heads * in->linear_k_dim + in->linear_v_heads * in->linear_v_dim);
        CHECKF(in->state_bytes == in->n_linear_attention * 8 * (rec + conv) &&
                   in->kv_bytes_per_pos == in->n_full_attention * 8 * in->n_kv_heads * in->head_dim &&
                   in->n_linear_attention > 0 && in->n_full_attention > 0,
               "%s: state_bytes %lld, kv_bytes_per_pos %lld", cases[i].args, (long long)in->state_bytes,
               (long long)in->kv_bytes_per_pos);
        nx_model_free(m);
    }
    /* a tied config over a file that still stores lm_head.weight: the load
     * reads the embedding, so the unused head counts neither as bytes nor
     * as parameters (it counted both) */
    const char *untied = nx_test_fixture("bench-bytes-head", "--preset tiny --dtype f32 --no-tie");
    nx_model *tied = nx_test_model(nx_test_fixture("bench-bytes-tied", "--preset tiny --dtype f32 --tie"), 1);
    CHECK(nx_test_system("sed -i 's/\"tie_word_embeddings\": *false/\"tie_word_embeddings\": true/g' '%s/config.json'",
                         untied) == 0);
    nx_model *stale = nx_test_model(untied, 1);
    if (tied && stale) {
        const nx_model_info *a = nx_model_get_info(tied), *b = nx_model_get_info(stale);
        CHECKF(b->tie_word_embeddings && b->weight_bytes > a->weight_bytes, "tied %d, %lld bytes stored",
               b->tie_word_embeddings, (long long)b->weight_bytes);
        CHECKF(b->decode_bytes == a->decode_bytes && b->n_params == a->n_params,
               "decode_bytes %lld, n_params %lld; a tied fixture %lld, %lld", (long long)b->decode_bytes,
               (long long)b->n_params, (long long)a->decode_bytes, (long long)a->n_params);
    }
    nx_model_free(tied);
    nx_model_free(stale);
}

static const nx_test tests[] = {
    {"bench_json_reports_every_figure", "bench --json on the bundled model: every required key, positive rates, T = 2..8",
     bench_json_reports_every_figure},
    {"bench_over_repeats_reports_what_it_ran",
     "bench --repeat 3: the state-inclusive roofline share is the weights' scaled; a draft vocab past V reports null; "
     "greedy with a penalty reports its options and matches plain",
     bench_over_repeats_reports_what_it_ran},
    {"bench_samples_when_asked", "bench with sampling options: settings in JSON, output match null, rates positive",
     bench_samples_when_asked},
    {"bench_without_a_head_reports_mtp_as_null", "no MTP head: MTP figures null in JSON, 'skipped' in the table; --mtp on an error",
     bench_without_a_head_reports_mtp_as_null},
    {"host_steal_reads_proc_stat_lines", "host steal: /proc/stat's aggregate line parsed, malformed lines refused, shares",
     host_steal_reads_proc_stat_lines},
    {"bad_bench_options_exit_2_with_one_line", "bad bench options exit 2 naming the option; a missing model exits 1",
     bad_bench_options_exit_2_with_one_line},
    {"decode_bytes_counts_the_main_stack_once",
     "nx_model_info.decode_bytes: tied / untied, HF / MLX, MTP head and a tied file's stored lm_head left out; "
     "state_bytes, kv_bytes_per_pos",
     decode_bytes_counts_the_main_stack_once},
};

NX_TEST_MAIN(tests)
