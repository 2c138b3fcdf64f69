/* cmd_bench.c — `nextn bench`: how fast this machine runs a checkpoint, and
 * how close decoding comes to what the machine's memory bandwidth allows.
 *
 * One process measures, on one model and one thread count:
 *   1. load time of the model (one load, first, so a bad -m fails at once;
 *      the files are usually in the page cache, so it is mostly mapping and
 *      checking) and later of the MTP head;
 *   2. the machine: read bandwidth and FMA throughput (bench_machine.h),
 *      before the long part, so a machine that cannot spare the probe's
 *      buffer fails early, and with the model's threads idle;
 *   3. R repeats of: a plain session, greedy or with the sampling options
 *      (prefill P prompt tokens, then decode G tokens after the one the
 *      prefill emits, as llama-bench's pp/tg split it) and, when there is a
 *      drafter, the same with MTP (rejection sampling when sampled). The two
 *      decode in turns of a few tokens (run_sessions) so that drift on a
 *      shared machine hits both alike, and the speed-up is the median of each
 *      repeat's ratio. Greedy MTP output must equal plain output; the bench
 *      checks it (a sampled MTP run gives another sample);
 *   4. the cost of one T-token forward (T = 1..8, what a verify of T-1
 *      drafts costs, without the rollback record a session's verify
 *      writes: the MTP sessions' own rounds give that verify's time, draft
 *      and commit beside it) on a state holding the prompt, interleaved
 *      1, 2, .., 8, 1, 2, .. so that the growing context and any drift are
 *      shared across T, each T's cost the median of its ratios to the same
 *      round's T = 1;
 *   5. the roofline: bandwidth / decode_bytes (nx_model_info) is the decode
 *      rate if every step streamed the weights from DRAM at full speed. The
 *      bandwidth is probed again right after each repeat's sessions, and each
 *      repeat's decode is set against its own probe (median of those
 *      shares): on a shared machine whose bandwidth moves, a probe minutes
 *      away from the decode it judges can be off by 1.5x. A second roofline
 *      adds the state a step moves (nx_model_info.state_bytes and
 *      kv_bytes_per_pos at the decode's mean context).
 *   6. the host's steal (host_steal.h) over each repeat and over step 4:
 *      on a shared VM whose host deschedules the vCPUs, the rates say more
 *      about the neighbours than about the code, and the report says so.
 * Stop tokens are ignored (every run decodes exactly G tokens) and the prompt
 * is fixed pseudo-random ids, so runs are comparable across machines and
 * engines. Rates are reported as the median over repeats with min and max. */
#include <assert.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_machine.h"
#include "cli.h"
#include "host_steal.h"

static const char *bench_help =
    "usage: nextn bench [-m DIR] [-t N] [--prompt 512] [--gen 128] [--mtp on|off|DIR] [--draft K|auto] [--draft-vocab N] [--draft-head-bits B|auto] [--draft-screen K|auto|off] [sampling] [--draft-pick argmax|sample] [--repeat 3] [--json]\n"
    "Measures load time, prefill and decode speed (plain and MTP, greedy unless sampling\n"
    "options are given, stop tokens ignored), MTP acceptance, the cost of a T-token verify\n"
    "against a 1-token step, and this machine's read bandwidth and FMA throughput, and\n"
    "prints decode as a share of the bandwidth roofline. See bench/README.md.\n\n" CLI_MODEL_HELP
    "  --prompt N         prompt tokens (fixed pseudo-random ids; default 512, as llama-bench pp512)\n"
    "  --gen N            tokens decoded after the prompt's first (default 128, as tg128)\n"
    "  --mtp on|off|DIR   MTP decode with the checkpoint's head (default when it has one),\n"
    "                     none, or a drafter directory\n"
    "  --draft K|auto     drafts per round (default: the drafter's block_size - 1)\n"
    "  --draft-vocab N    draft over token ids [0, N) only (verification uses all)\n"
    "  --draft-head-bits B|auto  draft with a B-bit copy of the LM head (default auto, 0: as\n"
    "                     stored; see nextn generate --help; verification uses the head)\n"
    CLI_DRAFT_SCREEN_HELP
    "sampling (both sessions; the MTP one then runs rejection sampling):\n"
    CLI_SAMPLING_HELP
    CLI_DRAFT_PICK_HELP
    "  --repeat R         runs of prefill, decode and MTP decode (default 3): median [min-max]\n"
    "  --json             one JSON object instead of the table\n"
    "  (--ref also routes the machine probes to their plain C paths)\n";

#define BENCH_VERIFY_T 8                     /* verify cost is measured for T = 1..8         */
#define BENCH_VERIFY_ROUNDS 5                /* interleaved rounds per --repeat             */
/* Bandwidth probe buffer: 256 MiB, or 16 MiB per thread, or the weight bytes
 * one decode step reads up to 1 GiB, whichever is most. The probe should read
 * what a step reads: a last-level cache holds as large a share of one as of
 * the other (a 260 MB L3 held part of a 256 MiB probe and of a q4 step's 424
 * MB, and the step then ran at 124% of the smaller probe's roofline). Past
 * 1 GiB a cache holds little of either, and a bigger buffer would only
 * crowd a large model's pages out of memory. */
#define BENCH_BW_BYTES ((size_t)256 << 20)
#define BENCH_BW_BYTES_PER_THREAD ((size_t)16 << 20)
#define BENCH_BW_BYTES_STEP_MAX ((size_t)1 << 30)
#define BENCH_PROBE_PASSES 6                 /* even: the read probe alternates two loops   */
#define BENCH_WARMUP_TOKENS 16
#define BENCH_TURN 16                        /* tokens between the marks of the sessions' turns */
#define BENCH_MAX_REPEAT 100
/* Above this share of stolen CPU time (median over the repeats, or over the
 * verify costs) the text report warns that the figures understate the
 * machine: a few percent is ordinary on a VM, 30-40% halved this project's
 * 2-thread decode (host_steal.h). */
#define BENCH_STEAL_WARN_PCT 5.0

typedef struct {
    long prompt, gen, repeat;
    const char *mtp;             /* NULL: the checkpoint's head if it has one    */
    cli_mtp mtp_mode;            /* what mtp says                                */
    int draft;                   /* 0: the drafter's default; NX_DRAFT_AUTO      */
    long draft_vocab;            /* 0: the whole vocabulary                      */
    long draft_head_bits;        /* 0: the head as stored; NX_DRAFT_HEAD_AUTO (the default) */
    long draft_screen;           /* 0: off; NX_DRAFT_SCREEN_AUTO (the default)    */
    nx_sampling sp;              /* both sessions' sampling (default greedy)      */
    nx_draft_pick draft_pick;    /* the MTP session's drafts under rejection sampling */
    int json;
} bench_opts;

/* 1 if o's sessions sample: the MTP output is then another sample, not plain's. */
static int sampled(const bench_opts *o) { return nx_spec_drafts_shape_output(NX_ACCEPT_DEFAULT, &o->sp); }

typedef struct {
    double median, min, max;
} bench_range;

/* Everything measured; rates are tok/s per repeat. */
typedef struct {
    int threads;
    double load_s, mtp_load_s;
    double *prefill, *decode, *mtp;         /* [repeat] each                        */
    double *bw_gbs;                          /* [repeat]: read GB/s probed right after its sessions */
    double *steal_pct;                       /* [repeat]: host steal over the repeat's sessions and probe, NAN unknown */
    double verify_steal_pct;                 /* host steal over the verify costs (step 4)  */
    size_t bw_bytes;                         /* the probes' buffer                   */
    int force_scalar;                        /* the probes' plain C path             */
    const char *mtp_skipped;                 /* why there is no MTP figure, or NULL  */
    nx_spec_stats st;                        /* MTP statistics summed over repeats   */
    int k_max, mtp_matches;
    int draft_head_bits;                     /* nx_drafter_head_bits: 0 as stored    */
    int draft_screen;                        /* nx_drafter_screen_k: 0 without       */
    int draft_vocab;                         /* nx_drafter_draft_vocab: 0 all ids    */
    int verify_rounds;
    double verify_s[BENCH_VERIFY_T + 1];     /* [T]: median seconds of a T-token call */
    double verify_cost[BENCH_VERIFY_T + 1];  /* [T]: median over rounds of T's time / 1's */
    bench_probe bw, fma;                     /* the probes before the sessions (step 2)  */
} bench_result;

static int parse_opts(int argc, char **argv, cli_model_opts *mo, bench_opts *o) {
    for (int i = 1; i < argc; i++) {
        int r = cli_model_option(argc, argv, &i, mo);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v;
        long k;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { fputs(bench_help, stdout); return -1; }
        if (strcmp(a, "--json") == 0) { o->json = 1; continue; }
        const int sampling = cli_sampling_option(a, i + 1 < argc ? argv[i + 1] : NULL, &o->sp);
        if (sampling < 0) return 2;
        if (sampling) { i++; continue; }
        if (strcmp(a, "--prompt") != 0 && strcmp(a, "--gen") != 0 && strcmp(a, "--repeat") != 0 && strcmp(a, "--mtp") != 0 &&
            strcmp(a, "--draft") != 0 && strcmp(a, "--draft-vocab") != 0 && strcmp(a, "--draft-head-bits") != 0 &&
            strcmp(a, "--draft-screen") != 0 && strcmp(a, "--draft-pick") != 0)
            return cli_usage_error("bench: unknown option '%s' (see nextn bench --help)", a);
        if (!(v = cli_value(argc, argv, &i))) return 2;
        if (strcmp(a, "--prompt") == 0) {
            if (cli_parse_int(v, 1, 1 << 20, &o->prompt)) return cli_usage_error("--prompt wants an integer in [1, %d], got '%s'", 1 << 20, v);
        } else if (strcmp(a, "--gen") == 0) {
            if (cli_parse_int(v, 1, 1 << 20, &o->gen)) return cli_usage_error("--gen wants an integer in [1, %d], got '%s'", 1 << 20, v);
        } else if (strcmp(a, "--repeat") == 0) {
            if (cli_parse_int(v, 1, BENCH_MAX_REPEAT, &o->repeat))
                return cli_usage_error("--repeat wants an integer in [1, %d], got '%s'", BENCH_MAX_REPEAT, v);
        } else if (strcmp(a, "--mtp") == 0) {
            if (cli_parse_mtp(v, &o->mtp_mode)) return 2;
            o->mtp = v;
        } else if (strcmp(a, "--draft-pick") == 0) {
            if (cli_parse_draft_pick(v, &o->draft_pick)) return 2;
        } else if (strcmp(a, "--draft-vocab") == 0) {
            if (cli_parse_int(v, 1, 1 << 30, &o->draft_vocab)) return cli_usage_error("--draft-vocab wants a positive integer, got '%s'", v);
        } else if (strcmp(a, "--draft-head-bits") == 0) {
            if (cli_parse_head_bits(v, &o->draft_head_bits))
                return cli_usage_error("--draft-head-bits wants auto, 0, 2, 3, 4, 5, 6 or 8, got '%s'", v);
        } else if (strcmp(a, "--draft-screen") == 0) {
            if (cli_parse_screen(v, &o->draft_screen))
                return cli_usage_error("--draft-screen wants auto, off or a number of rows, got '%s'", v);
        } else if (strcmp(v, "auto") == 0) {
            o->draft = NX_DRAFT_AUTO;
        } else if (cli_parse_int(v, 1, NX_SPEC_MAX_DRAFT, &k)) {
            return cli_usage_error("--draft wants 1..%d or auto, got '%s'", NX_SPEC_MAX_DRAFT, v);
        } else {
            o->draft = (int)k;
        }
    }
    return 0;
}

/* ---- measuring ------------------------------------------------------------ */

/* n token ids below vocab from a 64-bit LCG (Knuth's MMIX constants): the
 * same ids on every machine and run, with no tokenizer needed. */
static void lcg_ids(int32_t *ids, long n, int vocab, uint64_t *x) {
    for (long i = 0; i < n; i++) {
        *x = *x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((*x >> 33) % (uint64_t)vocab);
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median, min and max of v[0..n) (sorted in place). */
static bench_range range_of(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return (bench_range){n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1]};
}

/* range_of over the finite values of v[0..n) (reordered in place); NAN
 * throughout when there is none. */
static bench_range finite_range_of(double *v, int n) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) {
            double t = v[k];
            v[k++] = v[i], v[i] = t;
        }
    return k ? range_of(v, k) : (bench_range){NAN, NAN, NAN};
}

/* The median of scale * num[i] / den[i] over i < n, each measurement against
 * its own pair (drift of this VM between pairs hits both alike); tmp holds n
 * doubles. */
static double paired_median(const double *num, const double *den, int n, double scale, double *tmp) {
    for (int i = 0; i < n; i++) tmp[i] = scale * num[i] / den[i];
    return range_of(tmp, n).median;
}

/* One repeat's sessions over the same prompt, greedy or with o's sampling
 * (the MTP session then under rejection sampling with o's draft pick): a
 * plain one (index 0) and, with a drafter, an MTP one (index 1) of o's draft
 * length, both alive at once. Each
 * prefills in turn (its first token into out[i][0]); then they decode gen
 * more tokens in turns, turn k taking each session to (k + 1) * BENCH_TURN
 * tokens (or gen), the order of the two flipping every turn (plain, MTP,
 * MTP, plain, ...), so that a machine whose speed drifts slows both alike
 * and the speed-up compares the same minutes: on this project's shared
 * 2-core VMs, where a step's time moves by 1.3x within minutes, whole
 * sessions one after the other gave an MTP session's ratio anywhere from
 * 1.36x to 1.85x, turns of 16-32 tokens 1.60x and 1.64x. A turn ends with
 * the step that reaches its mark; a step is capped only by gen, as in a
 * session on its own. The drafter's statistics are added to *sum and its
 * longest round to *k_max (each may be NULL). Returns 0, or 1 after
 * printing the error. */
static int run_sessions(const nx_model *m, const nx_drafter *d, const bench_opts *o, const int32_t *prompt, int n_prompt,
                        long gen, int ctx, int32_t *const out[2], double prefill_s[2], double decode_s[2],
                        nx_spec_stats *sum, int *k_max) {
    const int n = d ? 2 : 1;
    nx_spec *s[2] = {NULL, NULL};
    long done[2] = {0, 0};
    char err[1024];
    int rc = 1;
    for (int i = 0; i < n; i++) {
        nx_spec_opts so = {.draft = i ? o->draft : 0, .draft_pick = o->draft_pick, .sampling = o->sp};
        if (nx_spec_new(m, i ? d : NULL, ctx, &so, &s[i], err, sizeof err)) goto fail;
        const double t0 = cli_now();
        if (nx_spec_prefill(s[i], prompt, n_prompt, out[i], err, sizeof err)) goto fail;
        prefill_s[i] = cli_now() - t0;
        decode_s[i] = 0;
    }
    for (int turn = 0; done[0] < gen || done[n - 1] < gen; turn++)
        for (int k = 0; k < n; k++) {
            const int i = turn % 2 ? n - 1 - k : k;
            const double t0 = cli_now();
            const long until = (turn + 1) * (long)BENCH_TURN < gen ? (turn + 1) * (long)BENCH_TURN : gen;
            while (done[i] < until) {
                int got = 0;
                if (nx_spec_step(s[i], (int)(gen - done[i]), out[i] + 1 + done[i], &got, err, sizeof err)) goto fail;
                if (got < 1) {
                    snprintf(err, sizeof err, "bench: a decode step emitted no token");
                    goto fail;
                }
                done[i] += got;
            }
            decode_s[i] += cli_now() - t0;
        }
    if (d && k_max) *k_max = nx_spec_max_draft(s[1]);
    if (d && sum) {
        const nx_spec_stats *st = nx_spec_get_stats(s[1]);
        sum->rounds += st->rounds;
        sum->drafted += st->drafted;
        sum->accepted += st->accepted;
        sum->emitted += st->emitted;
        sum->target_forwards += st->target_forwards;
        for (int i = 0; i < NX_SPEC_MAX_DRAFT; i++) sum->tried[i] += st->tried[i], sum->hits[i] += st->hits[i];
        sum->draft_s += st->draft_s, sum->verify_s += st->verify_s, sum->commit_s += st->commit_s;
    }
    rc = 0;
fail:
    if (rc) cli_fail("%s", err);
    nx_spec_free(s[0]);
    nx_spec_free(s[1]);
    return rc;
}

/* Median seconds of one nx_forward of T tokens, T = 1..BENCH_VERIFY_T, on a
 * state that holds the prompt, with every row's logits and hidden wanted (what
 * a verify asks for; the session's verify also writes the Gated DeltaNet
 * state after the block to a buffer of its own, keeping the one before for a
 * rollback, which this leaves out), into med[T]; and into cost[T] the
 * median over rounds of a T-token call's time over the same round's 1-token
 * call, so that a machine that changes speed between rounds does not skew the
 * ratio. One untimed round first. */
static int measure_verify(const nx_model *m, const int32_t *prompt, int n_prompt, int rounds, int ctx, double *med,
                          double *cost) {
    const nx_model_info *in = nx_model_get_info(m);
    char err[1024];
    nx_state *st = NULL;
    float *logits = malloc((size_t)BENCH_VERIFY_T * (size_t)in->vocab_size * sizeof *logits);
    float *hidden = malloc((size_t)BENCH_VERIFY_T * (size_t)in->hidden_size * sizeof *hidden);
    double *samples = malloc((size_t)BENCH_VERIFY_T * (size_t)rounds * sizeof *samples);
    double *ratios = malloc((size_t)rounds * sizeof *ratios);
    int32_t toks[BENCH_VERIFY_T];
    uint64_t x = 0x76657269667931ull; /* "verify1" */
    int rc = 1;
    if (!logits || !hidden || !samples || !ratios) {
        cli_fail("out of memory");
        goto done;
    }
    nx_forward_out last = {.logits = logits}, rows = {.logits = logits, .hidden = hidden, .all_rows = 1};
    if (nx_state_new(m, ctx, &st, err, sizeof err) || nx_forward(m, st, prompt, n_prompt, &last, err, sizeof err)) {
        cli_fail("%s", err);
        goto done;
    }
    for (int r = -1; r < rounds; r++)
        for (int T = 1; T <= BENCH_VERIFY_T; T++) {
            lcg_ids(toks, T, in->vocab_size, &x);
            double t0 = cli_now();
            if (nx_forward(m, st, toks, T, &rows, err, sizeof err)) {
                cli_fail("%s", err);
                goto done;
            }
            if (r >= 0) samples[(size_t)(T - 1) * (size_t)rounds + (size_t)r] = cli_now() - t0;
        }
    for (int T = 1; T <= BENCH_VERIFY_T; T++) /* ratios first: range_of sorts the samples */
        cost[T] = paired_median(samples + (size_t)(T - 1) * (size_t)rounds, samples, rounds, 1.0, ratios);
    for (int T = 1; T <= BENCH_VERIFY_T; T++) med[T] = range_of(samples + (size_t)(T - 1) * (size_t)rounds, rounds).median;
    rc = 0;
done:
    nx_state_free(st);
    free(logits);
    free(hidden);
    free(samples);
    free(ratios);
    return rc;
}

/* The drafter --mtp asks for; NULL with *why set when MTP is not measured,
 * NULL with *rc = 1 (error printed) when loading failed. */
static nx_drafter *load_drafter(const bench_opts *o, const nx_model *m, const char **why, int *rc) {
    *rc = 0;
    *why = NULL;
    if (o->mtp_mode == CLI_MTP_OFF) {
        *why = "--mtp off";
        return NULL;
    }
    if (o->mtp_mode == CLI_MTP_DEFAULT && !nx_model_get_info(m)->has_mtp) {
        *why = "the checkpoint has no MTP head (--mtp DIR takes a drafter directory)";
        return NULL;
    }
    char err[1024];
    nx_drafter *d = NULL;
    nx_drafter_opts dop = {0, (int)o->draft_vocab, (int)o->draft_head_bits, (int)o->draft_screen};
    if (nx_drafter_load(m, o->mtp_mode == CLI_MTP_DIR ? o->mtp : NULL, &dop, &d, err, sizeof err)) *rc = cli_fail("%s", err);
    return d;
}

/* Steps 3-4 of the file comment (the model is loaded). Returns 0 or 1. */
static int measure_model(const nx_model *m, const bench_opts *o, bench_result *res) {
    int rc = 1, err_rc;
    int32_t *prompt = NULL, *plain_out = NULL, *mtp_out = NULL;
    const nx_model_info *in = nx_model_get_info(m);
    double t0 = cli_now();
    nx_drafter *d = load_drafter(o, m, &res->mtp_skipped, &err_rc);
    if (err_rc) return 1;
    res->mtp_load_s = d ? cli_now() - t0 : -1;
    res->draft_head_bits = d ? nx_drafter_head_bits(d) : 0;
    res->draft_screen = d ? nx_drafter_screen_k(d) : 0;
    res->draft_vocab = d ? nx_drafter_draft_vocab(d) : 0;

    res->verify_rounds = BENCH_VERIFY_ROUNDS * (int)o->repeat;
    int64_t ctx = o->prompt + 1 + o->gen + NX_SPEC_MAX_DRAFT + 1;
    int64_t vctx = o->prompt + (int64_t)(res->verify_rounds + 1) * (BENCH_VERIFY_T * (BENCH_VERIFY_T + 1) / 2);
    int64_t need = ctx > vctx ? ctx : vctx;
    if (need > in->max_position_embeddings) {
        cli_fail("bench: --prompt %ld with --gen %ld and --repeat %ld needs %lld positions, more than the model's context of %d",
                 o->prompt, o->gen, o->repeat, (long long)need, in->max_position_embeddings);
        goto done;
    }
    size_t out_n = (size_t)(1 + o->gen + NX_SPEC_MAX_DRAFT + 1);
    prompt = malloc((size_t)o->prompt * sizeof *prompt);
    plain_out = malloc(out_n * sizeof *plain_out);
    mtp_out = malloc(out_n * sizeof *mtp_out);
    if (!prompt || !plain_out || !mtp_out) {
        cli_fail("out of memory");
        goto done;
    }
    uint64_t x = 0x70726f6d707431ull; /* "prompt1" */
    lcg_ids(prompt, o->prompt, in->vocab_size, &x);

    /* Warm-up (not timed): pages the mapped weights in and wakes the threads,
     * as llama-bench's warm-up run does. */
    int warm = o->prompt < BENCH_WARMUP_TOKENS ? (int)o->prompt : BENCH_WARMUP_TOKENS;
    int32_t *const outs[2] = {plain_out, mtp_out};
    double ps[2], ds[2];
    if (run_sessions(m, d, o, prompt, warm, 2, (int)ctx, outs, ps, ds, NULL, NULL)) goto done;

    res->mtp_matches = 1;
    host_ticks h0, h1;
    for (int r = 0; r < o->repeat; r++) {
        host_ticks_read(&h0);
        if (run_sessions(m, d, o, prompt, (int)o->prompt, o->gen, (int)ctx, outs, ps, ds, &res->st, &res->k_max))
            goto done;
        res->prefill[r] = (double)o->prompt / ps[0];
        res->decode[r] = (double)o->gen / ds[0];
        if (d) {
            res->mtp[r] = (double)o->gen / ds[1];
            res->mtp_matches &= memcmp(plain_out, mtp_out, (size_t)(1 + o->gen) * sizeof *mtp_out) == 0;
        }
        char err[1024];
        bench_probe bw;
        if (bench_read_bandwidth(res->bw_bytes, res->threads, BENCH_PROBE_PASSES, res->force_scalar, &bw, err, sizeof err)) {
            cli_fail("%s", err);
            goto done;
        }
        res->bw_gbs[r] = bw.rate;
        host_ticks_read(&h1);
        res->steal_pct[r] = host_steal_pct(&h0, &h1);
    }
    host_ticks_read(&h0);
    if (measure_verify(m, prompt, (int)o->prompt, res->verify_rounds, (int)vctx, res->verify_s, res->verify_cost))
        goto done;
    host_ticks_read(&h1);
    res->verify_steal_pct = host_steal_pct(&h0, &h1);
    rc = 0;
done:
    free(prompt);
    free(plain_out);
    free(mtp_out);
    nx_drafter_free(d);
    return rc;
}

/* ---- reporting ------------------------------------------------------------ */

/* The figures both outputs print, derived once. NAN marks "not measured". */
typedef struct {
    bench_range prefill, decode, mtp;
    double mtp_speedup;
    double acceptance, per_position[NX_SPEC_MAX_DRAFT], tokens_per_forward;
    double verify_cost[BENCH_VERIFY_T + 1];          /* [T]: bench_result's paired median */
    bench_range bandwidth;                            /* the per-repeat probes, GB/s */
    bench_range steal;                                /* host steal per repeat, % (NAN unknown) */
    double verify_steal_pct;
    double roofline_tok_s, roofline_pct, mtp_roofline_pct;
    /* the same with the bytes of state a decode step moves besides the
     * weights (GDN state read and written, KV cache read at the decode's mean
     * context): the ceiling an engine that streams everything once reaches */
    double moved_bytes, moved_roofline_tok_s, moved_roofline_pct;
    /* an MTP round's parts over all repeats (ms a round: nx_spec_stats), and
     * its verify against a plain step (1 / the median decode rate): the
     * verify as a session runs it, its rollback record included, which
     * verify_cost leaves out */
    double round_draft_ms, round_verify_ms, round_commit_ms, mtp_verify_cost;
} bench_summary;

static bench_summary summarize(bench_result *r, const bench_opts *o, const nx_model_info *in) {
    bench_summary s;
    int n = (int)o->repeat, has_mtp = r->mtp_skipped == NULL;
    s.prefill = range_of(r->prefill, n);
    /* each MTP session against the plain session it took turns with, before range_of
     * sorts the rates; each repeat's decode against the bandwidth probed
     * after it */
    double tmp[BENCH_MAX_REPEAT];
    assert(n <= BENCH_MAX_REPEAT);   /* parse_opts bounds --repeat */
    const double per_gbs = in->decode_bytes > 0 ? (double)in->decode_bytes / 1e9 : NAN;   /* GB per token */
    s.mtp_speedup = has_mtp ? paired_median(r->mtp, r->decode, n, 1.0, tmp) : NAN;
    s.roofline_pct = paired_median(r->decode, r->bw_gbs, n, 100.0 * per_gbs, tmp);
    s.mtp_roofline_pct = has_mtp ? paired_median(r->mtp, r->bw_gbs, n, 100.0 * per_gbs, tmp) : NAN;
    s.bandwidth = range_of(r->bw_gbs, n);
    s.steal = finite_range_of(r->steal_pct, n);
    s.verify_steal_pct = r->verify_steal_pct;
    s.mtp = has_mtp ? range_of(r->mtp, n) : (bench_range){NAN, NAN, NAN};
    s.decode = range_of(r->decode, n);
    s.acceptance = r->st.drafted ? (double)r->st.accepted / (double)r->st.drafted : NAN;
    for (int i = 0; i < NX_SPEC_MAX_DRAFT; i++)
        s.per_position[i] = r->st.tried[i] ? (double)r->st.hits[i] / (double)r->st.tried[i] : NAN;
    /* the prefill's token is in `emitted` but not made by a verify round */
    s.tokens_per_forward = r->st.rounds ? (double)(r->st.emitted - o->repeat) / (double)r->st.rounds : NAN;
    for (int T = 1; T <= BENCH_VERIFY_T; T++) s.verify_cost[T] = r->verify_cost[T];
    s.roofline_tok_s = s.bandwidth.median / per_gbs;
    /* step p of the decode attends to P + p + 1 positions, p = 0 .. G - 1 */
    const double mean_ctx = (double)o->prompt + (double)(o->gen + 1) / 2.0;
    s.moved_bytes = (double)in->decode_bytes + (double)in->state_bytes + (double)in->kv_bytes_per_pos * mean_ctx;
    /* the paired median scaled by the bytes a step moves over the weights'
     * bytes: a median commutes with scaling, and the rates and probes are
     * sorted by now, so a second paired median would pair them wrongly */
    s.moved_roofline_pct = s.roofline_pct * s.moved_bytes / (double)in->decode_bytes;
    s.moved_roofline_tok_s = s.bandwidth.median / (s.moved_bytes / 1e9);
    const double rounds = has_mtp && r->st.rounds ? (double)r->st.rounds : NAN;
    s.round_draft_ms = 1e3 * r->st.draft_s / rounds;
    s.round_verify_ms = 1e3 * r->st.verify_s / rounds;
    s.round_commit_ms = 1e3 * r->st.commit_s / rounds;
    s.mtp_verify_cost = s.round_verify_ms / 1e3 * s.decode.median;
    return s;
}

static json_t *jnum(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *jrange(bench_range r) {
    if (!isfinite(r.median)) return json_null();
    return json_pack("{s:o,s:o,s:o}", "median", jnum(r.median), "min", jnum(r.min), "max", jnum(r.max));
}

/* One JSON object on stdout (see bench/README.md for the keys). Returns 0 or 1. */
static int print_json(const bench_result *r, const bench_summary *s, const bench_opts *o, const nx_model_info *in) {
    int has_mtp = r->mtp_skipped == NULL;
    json_t *j = json_object(), *per = json_array(), *cost = json_object(), *vs = json_object();
    for (int i = 0; has_mtp && i < r->k_max; i++) json_array_append_new(per, jnum(s->per_position[i]));
    for (int T = 1; T <= BENCH_VERIFY_T; T++) {
        char key[8];
        snprintf(key, sizeof key, "%d", T);
        if (T > 1) json_object_set_new(cost, key, jnum(s->verify_cost[T]));
        json_object_set_new(vs, key, jnum(r->verify_s[T]));
    }
#define PUT(k, v) json_object_set_new(j, k, v)
    PUT("model", json_string(in->dir));
    PUT("params", json_integer(in->n_params));
    PUT("weight_dtype", json_string(in->weight_dtype));
    PUT("threads", json_integer(r->threads));
    PUT("kernels", json_string(in->kernels));
    PUT("kv_cache", json_string(in->kv_cache));
    PUT("prompt_tokens", json_integer(o->prompt));
    PUT("gen_tokens", json_integer(o->gen));
    PUT("repeat", json_integer(o->repeat));
    PUT("load_s", jnum(r->load_s));
    PUT("mtp_load_s", has_mtp ? jnum(r->mtp_load_s) : json_null());
    PUT("prefill_tok_s", jnum(s->prefill.median));
    PUT("prefill_tok_s_range", jrange(s->prefill));
    PUT("decode_tok_s", jnum(s->decode.median));
    PUT("decode_tok_s_range", jrange(s->decode));
    PUT("mtp_decode_tok_s", jnum(s->mtp.median));
    PUT("mtp_decode_tok_s_range", jrange(s->mtp));
    PUT("mtp_skipped", r->mtp_skipped ? json_string(r->mtp_skipped) : json_null());
    PUT("mtp_speedup", jnum(s->mtp_speedup));
    PUT("draft", has_mtp ? json_integer(r->k_max) : json_null());
    PUT("draft_vocab", r->draft_vocab ? json_integer(r->draft_vocab) : json_null());
    PUT("draft_head_bits", r->draft_head_bits ? json_integer(r->draft_head_bits) : json_null());
    PUT("draft_screen", r->draft_screen ? json_integer(r->draft_screen) : json_null());
    PUT("acceptance", jnum(s->acceptance));
    PUT("accepted", has_mtp ? json_integer(r->st.accepted) : json_null());
    PUT("drafted", has_mtp ? json_integer(r->st.drafted) : json_null());
    PUT("per_position", has_mtp ? per : (json_decref(per), json_null()));
    PUT("tokens_per_forward", jnum(s->tokens_per_forward));
    PUT("mtp_output_matches", has_mtp && !sampled(o) ? json_boolean(r->mtp_matches) : json_null());
    /* null for plain greedy decoding: argmax of the raw logits; a seed past
     * 2^63 as the signed integer of the same 64 bits (what --seed and the
     * server's "seed" take back) */
    const nx_sampling *sp = &o->sp;
    PUT("sampling", !sampled(o) && !nx_sampling_changes_logits(sp) ? json_null()
                                 : json_pack("{s:f,s:i,s:f,s:f,s:f,s:f,s:f,s:I,s:s}", "temperature", (double)sp->temperature,
                                             "top_k", sp->top_k, "top_p", (double)sp->top_p, "min_p", (double)sp->min_p,
                                             "repetition_penalty", (double)sp->repetition_penalty, "presence_penalty",
                                             (double)sp->presence_penalty, "frequency_penalty", (double)sp->frequency_penalty,
                                             "seed", (json_int_t)sp->seed, "draft_pick",
                                             o->draft_pick == NX_DRAFT_PICK_ARGMAX ? "argmax" : "sample"));
    PUT("mtp_round_ms", isfinite(s->round_verify_ms) ? json_pack("{s:o,s:o,s:o}", "draft", jnum(s->round_draft_ms), "verify",
                                                                 jnum(s->round_verify_ms), "commit", jnum(s->round_commit_ms))
                                                     : json_null());
    PUT("mtp_verify_cost", jnum(s->mtp_verify_cost));
    PUT("verify_cost", cost);
    PUT("verify_s", vs);
    PUT("verify_rounds", json_integer(r->verify_rounds));
    PUT("decode_bytes", json_integer(in->decode_bytes));
    PUT("state_bytes", json_integer(in->state_bytes));
    PUT("kv_bytes_per_pos", json_integer(in->kv_bytes_per_pos));
    PUT("moved_bytes", json_integer((json_int_t)llround(s->moved_bytes)));
    PUT("bandwidth_gbs", jnum(s->bandwidth.median));
    PUT("bandwidth_gbs_range", jrange(s->bandwidth));
    PUT("bandwidth_buffer_bytes", json_integer((json_int_t)r->bw.bytes));
    PUT("fma_gflops", jnum(r->fma.rate));
    PUT("probe_impl", json_string(r->bw.impl));
    PUT("roofline_tok_s", jnum(s->roofline_tok_s));
    PUT("roofline_pct", jnum(s->roofline_pct));
    PUT("mtp_roofline_pct", jnum(s->mtp_roofline_pct));
    PUT("moved_roofline_tok_s", jnum(s->moved_roofline_tok_s));
    PUT("moved_roofline_pct", jnum(s->moved_roofline_pct));
    PUT("steal_pct", jnum(s->steal.median));
    PUT("steal_pct_range", jrange(s->steal));
    PUT("verify_steal_pct", jnum(s->verify_steal_pct));
#undef PUT
    char *text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    json_decref(j);
    if (!text) return cli_fail("out of memory writing the JSON report");
    puts(text);
    free(text);
    return 0;
}

static void print_range(const char *what, bench_range r) {
    printf("%-14s %10.1f tok/s  [%.1f - %.1f]", what, r.median, r.min, r.max);
}

static void print_text(const bench_result *r, const bench_summary *s, const bench_opts *o, const nx_model_info *in) {
    printf("nextn bench    %s: %.2f M params, %s; %d thread%s, %s kernels, %s KV cache; prompt %ld, gen %ld, "
           "%ld repeat%s\n",
           in->dir, (double)in->n_params / 1e6, in->weight_dtype, r->threads, r->threads == 1 ? "" : "s", in->kernels,
           in->kv_cache, o->prompt, o->gen, o->repeat, o->repeat == 1 ? "" : "s");
    if (sampled(o))
        printf("sampling       temperature %g, top-k %d, top-p %g, min-p %g, seed %llu; %s drafts\n", o->sp.temperature,
               o->sp.top_k, o->sp.top_p, o->sp.min_p, (unsigned long long)o->sp.seed,
               o->draft_pick == NX_DRAFT_PICK_ARGMAX ? "argmax" : "sampled");
    if (nx_sampling_changes_logits(&o->sp))
        printf("penalties      repetition %g, presence %g, frequency %g%s\n", o->sp.repetition_penalty,
               o->sp.presence_penalty, o->sp.frequency_penalty, sampled(o) ? "" : "; greedy over the penalized logits");
    printf("load           %.3f s model", r->load_s);
    if (!r->mtp_skipped) printf(", %.3f s MTP head", r->mtp_load_s);
    printf("\n%-14s %10s        [min - max]\n", "", "median");
    print_range("prefill", s->prefill);
    printf("\n");
    print_range("decode", s->decode);
    printf("\n");
    if (r->mtp_skipped) {
        printf("%-14s skipped: %s\n", "mtp decode", r->mtp_skipped);
    } else {
        print_range("mtp decode", s->mtp);
        printf("  %.2fx plain\n", s->mtp_speedup);
        printf("%-14s K=%d, acceptance ", "mtp", r->k_max);
        if (isfinite(s->acceptance)) printf("%.1f%% (per position", 100.0 * s->acceptance);
        else printf("- (no drafts checked; per position");
        for (int i = 0; i < r->k_max; i++) { /* "-": no round drafted that far (auto K, short --gen) */
            if (isfinite(s->per_position[i])) printf(" %.2f", s->per_position[i]);
            else printf(" -");
        }
        printf("), %.2f tokens per verify, output %s\n", s->tokens_per_forward,
               sampled(o)        ? "a sample of the target's distribution (rejection sampling)"
               : r->mtp_matches ? "identical to plain"
                                 : "DIFFERS from plain decoding");
        if (isfinite(s->round_verify_ms))
            printf("%-14s draft %.2f ms, verify %.2f ms (%.2fx a plain step, its rollback record included), commit %.2f ms\n",
                   "mtp round", s->round_draft_ms, s->round_verify_ms, s->mtp_verify_cost, s->round_commit_ms);
        if (r->draft_head_bits) printf("%-14s drafts score a %d-bit copy of the LM head\n", "", r->draft_head_bits);
        if (r->draft_screen) printf("%-14s drafts score the %d rows a sketch ranks best\n", "", r->draft_screen);
        if (r->draft_vocab) printf("%-14s drafts range over token ids [0, %d) only\n", "", r->draft_vocab);
    }
    printf("%-14s", "verify cost");
    for (int T = 2; T <= BENCH_VERIFY_T; T++) printf(" T=%d %.2fx", T, s->verify_cost[T]);
    printf("  (1-token step %.3f ms, median of %d)\n", r->verify_s[1] * 1e3, r->verify_rounds);
    printf("%-14s %.2f MB of weights read per decode step; %.2f MB with the state it moves (GDN state\n"
           "%-14s read and written, %.2f MB; KV cache read at the decode's mean context, %.2f MB)\n",
           "weights/token", (double)in->decode_bytes / 1e6, s->moved_bytes / 1e6, "", (double)in->state_bytes / 1e6,
           (s->moved_bytes - (double)in->decode_bytes - (double)in->state_bytes) / 1e6);
    printf("%-14s read %.1f GB/s [%.1f - %.1f] (%zu MiB, %d thread%s, %s, after each repeat); FMA %.1f GFLOP/s\n",
           "machine", s->bandwidth.median, s->bandwidth.min, s->bandwidth.max, r->bw.bytes >> 20, r->bw.threads,
           r->bw.threads == 1 ? "" : "s", r->bw.impl, r->fma.rate);
    if (isfinite(s->steal.median) || isfinite(s->verify_steal_pct)) {
        printf("%-14s %.1f%% [%.1f - %.1f] of the CPU time the repeats wanted, %.1f%% in the verify costs\n", "host steal",
               s->steal.median, s->steal.min, s->steal.max, s->verify_steal_pct);
        if (s->steal.median > BENCH_STEAL_WARN_PCT || s->verify_steal_pct > BENCH_STEAL_WARN_PCT)
            printf("%-14s WARNING: the host ran other work on these CPUs, and every parallel job waits for a\n"
                   "%-14s descheduled one: the rates understate this machine (run again when it is quiet)\n", "", "");
    } else {
        printf("%-14s unknown (no steal counter in /proc/stat)\n", "host steal");
    }
    printf("%-14s %.0f tok/s at %.1f GB/s; decode runs at %.0f%% of it", "roofline", s->roofline_tok_s, s->bandwidth.median,
           s->roofline_pct);
    if (!r->mtp_skipped) printf(", MTP decode at %.0f%%", s->mtp_roofline_pct);
    printf("\n%-14s with the state's bytes too: %.0f tok/s; decode runs at %.0f%% of it", "", s->moved_roofline_tok_s,
           s->moved_roofline_pct);
    printf("\n%-14s (each repeat against its own probe, median; weights that fit in cache are not\n"
           "%-14s read from DRAM and can run above 100%%)\n", "", "");
}

int cmd_bench(int argc, char **argv) {
    cli_model_opts mo = {0};
    bench_opts o = {.prompt = 512, .gen = 128, .repeat = 3, .draft_head_bits = CLI_DRAFT_HEAD_BITS,
                    .draft_screen = CLI_DRAFT_SCREEN, .sp = nx_sampling_default()};
    int r = parse_opts(argc, argv, &mo, &o);
    if (r) return r < 0 ? 0 : r;
    bench_result res = {0};
    res.prefill = calloc((size_t)o.repeat, sizeof *res.prefill);
    res.decode = calloc((size_t)o.repeat, sizeof *res.decode);
    res.mtp = calloc((size_t)o.repeat, sizeof *res.mtp);
    res.bw_gbs = calloc((size_t)o.repeat, sizeof *res.bw_gbs);
    res.steal_pct = calloc((size_t)o.repeat, sizeof *res.steal_pct);
    nx_model *m = NULL;
    char err[1024];
    int rc = 1;
    if (!res.prefill || !res.decode || !res.mtp || !res.bw_gbs || !res.steal_pct) {
        cli_fail("out of memory");
        goto done;
    }
    double t0 = cli_now();
    if (!(m = cli_load_model(&mo))) goto done;
    res.load_s = cli_now() - t0;
    res.threads = nx_model_get_info(m)->n_threads;   /* the probes use as many as the model */
    res.force_scalar = mo.load.force_reference || mo.load.kernels == NX_KERNELS_SCALAR;   /* the probes follow */
    res.bw_bytes = (size_t)res.threads * BENCH_BW_BYTES_PER_THREAD;
    if (res.bw_bytes < BENCH_BW_BYTES) res.bw_bytes = BENCH_BW_BYTES;
    const int64_t step_bytes = nx_model_get_info(m)->decode_bytes;
    const size_t step_probe = step_bytes > (int64_t)BENCH_BW_BYTES_STEP_MAX ? BENCH_BW_BYTES_STEP_MAX : (size_t)step_bytes;
    if (step_bytes > 0 && step_probe > res.bw_bytes) res.bw_bytes = step_probe;
    /* one pass: this probe only checks the buffer can be had (its rate is
     * not used; each repeat is probed again after its sessions) */
    if (bench_read_bandwidth(res.bw_bytes, res.threads, 1, res.force_scalar, &res.bw, err, sizeof err) ||
        bench_fma_throughput(res.threads, BENCH_PROBE_PASSES, res.force_scalar, &res.fma, err, sizeof err)) {
        cli_fail("%s", err);
        goto done;
    }
    if (measure_model(m, &o, &res)) goto done;
    const nx_model_info *in = nx_model_get_info(m);
    bench_summary s = summarize(&res, &o, in);
    if (o.json) rc = print_json(&res, &s, &o, in);
    else print_text(&res, &s, &o, in), rc = 0;
done:
    free(res.prefill);
    free(res.decode);
    free(res.mtp);
    free(res.bw_gbs);
    free(res.steal_pct);
    nx_model_free(m);
    return rc;
}
