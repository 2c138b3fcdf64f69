/* nextn.h — the public API of nextn, a CPU inference engine for the Qwen3.5
 * model family with native multi-token-prediction speculative decoding.
 *
 * This header is the whole boundary: the CLI, the server and the tools use
 * nothing else. Conventions, one promise each:
 *   - Functions that can fail return nx_status and, when it is not NX_OK, write
 *     a one-line message naming the file/tensor/field at fault into
 *     `err` (at most errlen bytes, NUL-terminated). err may be NULL.
 *   - An object created by nx_X_new / nx_X_load is freed by nx_X_free;
 *     every nx_X_free accepts NULL as a harmless no-op.
 *   - A failed call leaves its objects as they were before the call.
 *   - Buffers passed in by the caller stay owned by the caller.
 */
#ifndef NEXTN_H
#define NEXTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status codes ----------------------------------------------------- */
typedef enum {
    NX_OK = 0,
    NX_EINVAL,        /* bad argument, or an API used out of order            */
    NX_EIO,           /* a file could not be opened, mapped, read or written  */
    NX_EFORMAT,       /* a file's contents are malformed                      */
    NX_EUNSUPPORTED,  /* well-formed input this build does not handle (yet)   */
    NX_ENOMEM,        /* an allocation failed                                 */
    NX_ESTATE,        /* the object is not in a state that allows this call   */
    NX_ERANGE,        /* a size limit was exceeded (e.g. context length)      */
    NX_EBUSY          /* the engine's queue is full: try again later          */
} nx_status;

/* "ok", "invalid argument", ... — a static string. */
const char *nx_status_str(nx_status s);

/* ---- Model ------------------------------------------------------------- */

/* A loaded target model: immutable config plus read-only weights mapped from
 * the checkpoint files. Safe to share between threads for reading; each
 * sequence gets its own nx_state. A thread that runs it needs 1 MB of stack
 * or more (its kernels keep up to 384 KB of row scratch there; glibc's
 * default of 8 MB is ample, musl's 128 KB is not). */
typedef struct nx_model nx_model;

/* Kernel sets for nx_load_opts.kernels, by age: SCALAR, AVX2, AVXVNNI,
 * AVX512VNNI (AVXVNNI was added last, so its value is the largest). A set
 * names the newest one to use, and a CPU without its instructions gets the
 * newest older one it runs: AVXVNNI on a CPU with AVX-512 VNNI but no
 * AVX-VNNI (Zen 4) gives AVX2, AVX512VNNI on Alder Lake gives AVXVNNI.
 * AVX2, AVXVNNI and AVX512VNNI compute the same bits (only the speed
 * differs); SCALAR, the reference, agrees with them to rounding. */
typedef enum {
    NX_KERNELS_AUTO = 0,    /* the newest set this CPU runs                      */
    NX_KERNELS_SCALAR,      /* plain C (as force_reference)                      */
    NX_KERNELS_AVX2,        /* AVX2 + FMA + F16C                                 */
    NX_KERNELS_AVX512VNNI,  /* AVX2, and AVX-512 (F, BW, VL, VNNI) where it pays  */
    NX_KERNELS_AVXVNNI      /* AVX2, and the int8 products on AVX-VNNI (256-bit
                               vpdpbusd: CPUs without AVX-512, e.g. Intel
                               client cores from Alder Lake on); between AVX2
                               and AVX512VNNI in age                          */
} nx_kernels;

/* The set named "auto", "scalar", "avx2", "avxvnni" or "avx512vnni" in *out;
 * NX_EINVAL for any other name. */
nx_status nx_kernels_parse(const char *name, nx_kernels *out);

/* How sequence states store the K and V rows of the attention layers (the
 * MTP head's too): what every step's attention streams, the one part of a
 * step that grows with the context. */
typedef enum {
    NX_KV_F32 = 0,          /* f32: the rows exactly as computed (the default)  */
    NX_KV_F16               /* IEEE half: half the memory and half the bytes a
                               step reads; each element rounded to nearest
                               even, magnitudes past 65504 stored as +-65504.
                               Steps and verifies read the same rows, so MTP
                               output stays identical to plain decoding */
} nx_kv_cache;

/* The layout named "f32" or "f16" in *out; NX_EINVAL for any other name. */
nx_status nx_kv_cache_parse(const char *name, nx_kv_cache *out);

typedef struct {
    int n_threads;          /* worker threads for kernels; <= 0: one per physical
                               core, at most the CPUs the process may run on */
    int force_reference;    /* 1: route every kernel to its scalar reference    */
    int f32_activations;    /* 1: quantized weights multiply f32 activations
                               (slower); 0: activations are rounded to int8 per
                               weight group and multiplied with integer dot
                               products (the default)                        */
    nx_kernels kernels;     /* the newest kernel set to use, where the CPU runs
                               it (older ones otherwise); AUTO: the newest;
                               force_reference wins over it. The kernels are
                               process-wide: each successful load sets them
                               for every model (as does nx_quantize, to the
                               newest), so load while no other model runs */
    nx_kv_cache kv_cache;   /* the KV cache layout of this model's states       */
} nx_load_opts;

/* Loads a Qwen3.5 checkpoint directory: config.json plus model.safetensors or
 * a sharded set (model.safetensors.index.json), in the raw Hugging Face layout
 * or the mlx-community layout. Every tensor is checked against the config
 * before this returns. opts may be NULL (defaults). Free with nx_model_free. */
nx_status nx_model_load(const char *dir, const nx_load_opts *opts, nx_model **out,
                        char *err, size_t errlen);
void nx_model_free(nx_model *m);

/* Architecture facts, for `nextn inspect` and for sizing caller buffers.
 * Strings point into the model and live as long as it does. */
typedef struct {
    const char *dir;
    const char *model_type;          /* "qwen3_5" or "qwen3_5_text"            */
    const char *layout;              /* "hf" (raw, norms +1) or "mlx" (baked)  */
    const char *weight_dtype;        /* format of most weight bytes, e.g. "BF16", "AFFINE-Q4 (+BF16)" */
    int vocab_size, hidden_size, n_layers, intermediate_size;
    int n_heads, n_kv_heads, head_dim, rotary_dim;
    int linear_k_heads, linear_v_heads, linear_k_dim, linear_v_dim, conv_kernel;
    int n_full_attention, n_linear_attention;
    const char *layer_pattern;       /* one char per layer: 'L' GDN, 'A' attention */
    double rope_theta, rms_norm_eps;
    int max_position_embeddings;
    int tie_word_embeddings;
    int has_mtp;                     /* mtp.* tensors present                   */
    int n_mtp_tensors;
    int n_eos;                       /* eos ids from config (+generation_config) */
    const int32_t *eos_ids;
    int64_t n_params;                /* main stack, lm_head counted once if tied */
    int64_t weight_bytes;            /* bytes of all tensors in the files       */
    int64_t decode_bytes;            /* weight bytes one decode step reads: every
                                        main-stack matrix, lm_head (or the tied
                                        embedding) once, one embedding row; not
                                        the MTP head                            */
    int64_t state_bytes;             /* sequence-state bytes one decode step
                                        moves besides the weights: each GDN
                                        layer's recurrent and conv state read
                                        and written once (f32)                  */
    int64_t kv_bytes_per_pos;        /* KV cache bytes one decode step reads per
                                        position it attends to: K and V of every
                                        attention layer (in the kv_cache layout
                                        the model was loaded with)              */
    int n_files, n_tensors;
    const char *quantization;        /* "none" or a description                 */
    int n_threads;                   /* worker threads of the model's pool       */
    const char *kernels;             /* the kernel set this load selected:
                                        "avx512vnni", "avxvnni", "avx2" or
                                        "scalar" (a later load may select
                                        another)                                */
    const char *kv_cache;            /* "f32" or "f16" (nx_load_opts.kv_cache)  */
} nx_model_info;

const nx_model_info *nx_model_get_info(const nx_model *m);

/* ---- Sequence state ---------------------------------------------------- */

/* Everything one sequence mutates: the KV cache of every attention layer,
 * the conv and recurrent state of every Gated DeltaNet layer, and scratch.
 * Holds at most max_ctx positions. Free with nx_state_free. */
typedef struct nx_state nx_state;

nx_status nx_state_new(const nx_model *m, int max_ctx, nx_state **out, char *err, size_t errlen);
void nx_state_free(nx_state *s);
/* Forget the sequence (position back to 0); keeps the allocation. */
void nx_state_reset(nx_state *s);
/* Number of tokens the state holds (the position of the next token). */
int nx_state_pos(const nx_state *s);
int nx_state_max_ctx(const nx_state *s);

/* ---- Forward ----------------------------------------------------------- */

/* Outputs of one forward call; every pointer may be NULL (not wanted). The
 * caller owns the buffers. With all_rows = 1 each buffer holds one row per
 * input token ([n, vocab] / [n, hidden]); with all_rows = 0 only the row of the
 * last input token ([1, ...]); all_hidden = 1 asks for every row of hidden and
 * prenorm while logits stay last-row only (what the MTP head's prefill needs). */
typedef struct {
    float *logits;    /* lm_head(final_norm(h))                      [.., vocab]  */
    float *hidden;    /* post-final-norm hidden (what the MTP head reads) [.., hidden] */
    float *prenorm;   /* last layer's output before the final norm   [.., hidden] */
    int all_rows;     /* every row of every output                               */
    int all_hidden;   /* every row of hidden/prenorm only (logits: last row)     */
} nx_forward_out;

/* Runs tokens[0..n) at positions pos..pos+n-1 of state s and advances it.
 * The result does not depend on how a sequence is split into calls: any
 * split produces bit-identical rows (same kernels, same accumulation order).
 * Errors: token id out of range (NX_EINVAL, names the id and index), context
 * full (NX_ERANGE); on error the state is unchanged. */
nx_status nx_forward(const nx_model *m, nx_state *s, const int32_t *tokens, int n,
                     const nx_forward_out *out, char *err, size_t errlen);

/* ---- Quantization ------------------------------------------------------ */

/* MLX quantization modes (spec §2.6.1): affine (uint codes, a scale and a
 * bias a group) and the small-float modes, E2M1 or E4M3 elements with one
 * shared scale a group: mxfp4 (4 bits, group 32), nvfp4 (4, 16), mxfp8
 * (8, 32). */
typedef enum { NX_QUANT_AFFINE = 0, NX_QUANT_MXFP4, NX_QUANT_NVFP4, NX_QUANT_MXFP8 } nx_quant_mode;

/* The mode's MLX name ("affine", "mxfp4", ...) and, for a small-float mode,
 * its own bits and group size (affine: 0 and 0, the caller's to choose);
 * NULL for a value that is not an nx_quant_mode. bits and group may be NULL. */
const char *nx_quant_mode_info(nx_quant_mode mode, int *bits, int *group);

typedef struct {
    int bits;              /* affine: 2, 3, 4, 5, 6 or 8; the small-float modes:
                              0 or their own                                     */
    int group_size;        /* affine: 32, 64 or 128, 0 means 64; the small-float
                              modes: 0 or their own                              */
    int keep_mtp_dense;    /* leave the MTP head's matrices unquantized          */
    nx_quant_mode mode;    /* NX_QUANT_AFFINE (0) unless set                     */
} nx_quantize_opts;

typedef struct {
    int64_t tensors, quantized;    /* tensors written / of them quantized        */
    int64_t bytes_in, bytes_out;   /* tensor bytes read / written                */
    int bits, group_size;          /* what the quantized matrices use            */
} nx_quantize_report;

/* Writes out_dir (created if missing; an existing one must be empty) as an
 * mlx-community-style checkpoint of the dense checkpoint in in_dir, quantized in an MLX mode (spec
 * §2.6.1): mlx names (language_model.model.*, the MTP head as
 * language_model.mtp.*), zero-centred norms stored as 1 + w, conv1d as
 * [CD, Kc, 1], every matrix whose column count is a multiple of the group
 * (embeddings and the MTP head included, unless keep_mtp_dense) as U32 codes
 * + scales + biases in the source dtype (affine) or U32 codes + U8 scales
 * (the small-float modes, rounded as mlx.core.quantize rounds; a matrix of
 * more than 32768 columns stays dense in these modes); a "quantization" block in
 * config.json; tokenizer and generation files copied. in_dir is loaded and
 * checked first (a load with default options: it selects the newest kernel
 * set, see nx_load_opts.kernels); an already quantized input is
 * NX_EUNSUPPORTED, a non-finite weight NX_EFORMAT naming the tensor. A run
 * that fails removes what it wrote (and out_dir, if it made it). rep may
 * be NULL. */
nx_status nx_quantize(const char *in_dir, const char *out_dir, const nx_quantize_opts *opts, nx_quantize_report *rep,
                      char *err, size_t errlen);

/* ---- Sampling ---------------------------------------------------------- */

/* A logit bias entry: bias is added to token id's logit before any other
 * processing, greedy included (OpenAI's logit_bias: -100 all but bans the
 * token, +100 all but forces it). */
typedef struct {
    int32_t id;
    float bias;
} nx_logit_bias;

#define NX_MAX_LOGIT_BIAS 1024   /* entries a sampling may carry */

/* Logit processing and sampling parameters. temperature <= 0 means greedy
 * (argmax, ties to the lowest id). top_k <= 0, top_p >= 1 and min_p <= 0
 * disable those filters; penalties of 1 (repetition) and 0 (presence,
 * frequency) disable those. The repetition penalty divides (multiplies,
 * where negative) the logit of every token in the sequence so far, prompt
 * included; the presence and frequency penalties count the output only: a
 * speculative session's, the tokens after its last prefill, extend or
 * absorb (a restored session keeps the split its snapshot had).
 *
 * logit_bias[0..n_logit_bias) is borrowed: it must stay valid while a call
 * given this nx_sampling runs. nx_spec_new and nx_engine_submit keep copies,
 * and refuse (NX_EINVAL) more than NX_MAX_LOGIT_BIAS entries, ids outside
 * the vocabulary and biases that are not finite; nx_sample, which cannot
 * fail, skips ids outside the vocabulary. */
typedef struct {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
    float repetition_penalty;
    float presence_penalty;
    float frequency_penalty;
    uint64_t seed;
    const nx_logit_bias *logit_bias;
    int n_logit_bias;
} nx_sampling;

/* Greedy defaults (temperature 0, every filter off, seed 0, no bias). */
nx_sampling nx_sampling_default(void);

/* NX_EINVAL, with a message naming the field or entry, unless p is what
 * nx_spec_new takes for a vocabulary of vocab_size tokens: every float
 * finite, the logit bias within the vocabulary and finite. */
nx_status nx_sampling_check(const nx_sampling *p, int vocab_size, char *err, size_t errlen);

/* 1 if p's logit bias or penalties change the logits before the temperature
 * (so that a greedy choice can differ from the argmax of the raw logits). */
int nx_sampling_changes_logits(const nx_sampling *p);

/* One emitted token's log-probability, and the n_top likeliest tokens at its
 * position (OpenAI's logprobs / top_logprobs). The distribution is the
 * model's own: log_softmax of the logits as the forward gives them, before
 * any processing -- logit bias, penalties, temperature and filters do not
 * change it (vLLM's default, raw logprobs). top: most likely first, ties to
 * the lower id; the emitted token need not be among them. */
#define NX_MAX_TOP_LOGPROBS 20

typedef struct {
    int32_t id;                               /* the emitted token             */
    float logprob;
    int n_top;                                /* 0 .. NX_MAX_TOP_LOGPROBS      */
    int32_t top_id[NX_MAX_TOP_LOGPROBS];
    float top_logprob[NX_MAX_TOP_LOGPROBS];
} nx_token_logprob;

/* A sampler owns the scratch for one vocabulary size; one per sequence. */
typedef struct nx_sampler nx_sampler;

nx_status nx_sampler_new(int vocab_size, nx_sampler **out, char *err, size_t errlen);
void nx_sampler_free(nx_sampler *s);

/* Chooses the token at absolute sequence position `position` from `logits`
 * ([vocab], modified in place by the processing). history[0..n_history) are
 * the tokens seen so far, of which history[0..n_input) are the input (the
 * prompt): the repetition penalty sees them all, the presence and frequency
 * penalties only the output history[n_input..n_history) (OpenAI's
 * definition: the tokens sampled so far). The random draw is a pure function
 * of (seed, position), so the choice does not depend on how decoding was
 * batched. Returns the token id. */
int32_t nx_sample(nx_sampler *s, const nx_sampling *p, float *logits,
                  const int32_t *history, int n_history, int n_input, int64_t position);

/* ---- MTP drafter and speculative decoding ------------------------------ */

/* The native Qwen3.5 MTP head, bound to a target model: it reads the target's
 * embed_tokens and lm_head (no copies) and owns one full-attention layer.
 * Immutable after loading; one drafter serves many sequences. */
typedef struct nx_drafter nx_drafter;

typedef struct {
    int hidden_prenorm;   /* 1: feed the head the last layer's PRE-final-norm
                             hidden (the reference design) instead of the
                             post-norm one every current runtime uses */
    int draft_vocab;      /* N > 0: draft over token ids [0, N) only, the first
                             N rows of lm_head (byte-level BPE ids follow the
                             merge order, most frequent first); other ids get
                             logit -inf. Verification always uses the full
                             head, so output stays exact. 0 or >= vocab: all */
    int draft_head_bits;  /* B in 2..6 or 8: draft with a copy of those head rows
                             quantized at load to B bits (MLX affine, group
                             64 (32 if the hidden size needs it), bf16
                             scales), held by the drafter; made only
                             when smaller than the head as stored. Drafts get
                             cheaper, acceptance may drop a little; greedy
                             and match output stay exact, rejection sampling
                             keeps the distribution (a seed's sample depends
                             on the drafts). 0: the head as stored.
                             NX_DRAFT_HEAD_AUTO: 4 bits where the head is
                             stored wider and is too big for a cache (64 MiB
                             or more) and no screen (below) is made, else as
                             stored */
    int draft_screen;     /* K > 0: rank the draft head's rows by a one-bit
                             sign sketch built at load (1 bit per weight) and
                             score only the K best with the head; the others
                             get logit -inf. A draft reads the sketch and K
                             rows instead of the whole head; it is the head's
                             own argmax whenever that row ranks among the K.
                             Output stays exact as with draft_vocab. K at
                             or above the head's rows: no screen. The hidden
                             size must be a multiple of 64 (up to 131072).
                             0: off. NX_DRAFT_SCREEN_AUTO: 2048 where the
                             head is 64 MiB or more and its hidden size
                             fits, else off */
} nx_drafter_opts;

#define NX_DRAFT_HEAD_AUTO (-1)
#define NX_DRAFT_SCREEN_AUTO (-1)

/* dir NULL: the target checkpoint's own mtp.* tensors (or an mtp.safetensors
 * beside them); else a drafter directory (config.json model_type
 * qwen3_5_mtp). Errors name the drafter and the tensor or field: not a
 * qwen3_5_mtp drafter, hidden size mismatch, missing or mis-shaped tensors.
 * The target must outlive the drafter. Free with nx_drafter_free. */
nx_status nx_drafter_load(const nx_model *target, const char *dir, const nx_drafter_opts *opts, nx_drafter **out,
                          char *err, size_t errlen);
void nx_drafter_free(nx_drafter *d);
/* Tokens per verify block by default: the pending token + block_size-1 drafts. */
int nx_drafter_block_size(const nx_drafter *d);
/* Bits of the LM head copy drafts are scored over, or 0 when they use the
 * head as stored (no copy was asked for, or it would not be smaller). */
int nx_drafter_head_bits(const nx_drafter *d);
/* Rows a draft scores exactly after the screen (draft_screen), or 0 when
 * drafts score the whole head. */
int nx_drafter_screen_k(const nx_drafter *d);
/* N when drafts range over token ids [0, N) only (draft_vocab below the
 * vocabulary), or 0 when they range over all of it. */
int nx_drafter_draft_vocab(const nx_drafter *d);
/* 1 if the drafter reads the pre-final-norm hidden (nx_drafter_opts). */
int nx_drafter_hidden_prenorm(const nx_drafter *d);

/* Teacher-forced first-step draft logits of a sequence: runs the target over
 * tokens[0..n) and the head over entries p = 0..n-2, entry p from token p+1
 * and the target's hidden row p (spec §5.3). logits: [n-1][vocab]; hidden, if
 * not NULL: [n-1][hidden_size] head outputs after mtp.norm. n >= 2. */
nx_status nx_drafter_teacher_forced(const nx_drafter *d, const int32_t *tokens, int n, float *logits, float *hidden,
                                    char *err, size_t errlen);

/* Speculative decoding of one sequence with the MTP drafter (spec §6-§7).
 *
 *   FRESH --prefill--> READY --draft--> DRAFTED --verify--> VERIFIED --commit--> READY
 *
 * prefill runs the prompt, emits the first token and builds the drafter's
 * entries; draft proposes K tokens; verify runs the pending token and the
 * drafts in ONE target forward and decides how many are accepted; commit
 * emits the accepted drafts plus one token from the target, rolls the target
 * back past the rest (KV trim, Gated DeltaNet state: the state from before
 * the block, with the kept tokens' recurrence steps replayed from inputs the
 * verify kept, as the next forward reads it) and rebuilds the drafter
 * entries of the accepted tokens from the target's verified hiddens. verify
 * straight from READY is a plain decoding step (K = 0). A call in the wrong
 * state is NX_ESTATE and changes nothing; a failure inside verify or commit
 * leaves the session in a sticky error state (every later call returns that
 * error). nx_spec_step runs one whole round. */
typedef struct nx_spec nx_spec;

typedef enum {
    NX_ACCEPT_DEFAULT = 0,  /* greedy at temperature 0, rejection otherwise        */
    NX_ACCEPT_GREEDY,       /* argmax target; a draft is accepted iff it equals it  */
    NX_ACCEPT_MATCH,        /* the target token at each position is sampled with the
                               (seed, position) stream; accepted iff equal: output is
                               identical to plain sampling with the same seed      */
    NX_ACCEPT_REJECTION     /* speculative (rejection) sampling, lossless in
                               distribution (spec §7.2)                            */
} nx_accept_mode;

/* How the head's drafts are chosen under rejection sampling (spec §7.2).
 * A draft d drawn from the head's distribution Q (the draft logits through
 * the request's own processing: bias, penalties, temperature, top-k/p,
 * min-p) is accepted with probability min(1, P(d)/Q(d)), which over a draw
 * is sum_x min(P(x), Q(x)); the head's likeliest token is accepted with
 * probability P(argmax Q). The first wins where Q resembles P, the second
 * where Q is much flatter than P. Both keep the target's distribution.
 * Greedy and match acceptance accept by equality, where the likeliest token
 * is the best guess: their drafts are always the argmax. An argmax draft is
 * taken after the request's logit bias and penalties (the target's greedy
 * choice from the head's logits; with a screen, among its candidates). A
 * screen or a draft vocabulary scores the ids a positive logit bias raises
 * too, so that a token the bias makes the target's choice can be drafted. */
typedef enum {
    NX_DRAFT_PICK_DEFAULT = 0,  /* SAMPLE                                        */
    NX_DRAFT_PICK_ARGMAX,       /* the head's likeliest token after the bias and
                                   penalties (Q one-hot)                       */
    NX_DRAFT_PICK_SAMPLE        /* drawn from Q with the (seed, position) draft
                                   stream; argmax where the sampling is greedy
                                   or the acceptance is not rejection          */
} nx_draft_pick;

#define NX_DRAFT_AUTO (-1)
#define NX_SPEC_MAX_DRAFT 15     /* drafts per round at most (verify block <= 16) */

typedef struct {
    int draft;                  /* K >= 1 drafts per round; 0: block_size-1 of the
                                   drafter; NX_DRAFT_AUTO: adapt per round        */
    nx_accept_mode accept;
    nx_draft_pick draft_pick;   /* drafts under rejection sampling (above)       */
    nx_sampling sampling;
    const int32_t *stop_ids;    /* tokens that end generation (copied)          */
    int n_stop;                 /* 0..16                                          */
    int logprobs;               /* 1: keep each emitted token's nx_token_logprob
                                   (nx_spec_logprobs); 0: off, nothing computed */
    int top_logprobs;           /* with logprobs or input_logprobs: 0..NX_MAX_TOP_LOGPROBS
                                   likeliest tokens per position                */
    int input_logprobs;         /* 1: keep the nx_token_logprob of every input token
                                   (nx_spec_input_logprobs): prompts are then read
                                   in pieces of 16 rows with every row's logits --
                                   scoring, slower than a prefill               */
} nx_spec_opts;

typedef struct {
    int64_t rounds;             /* verify forwards after prefill                  */
    int64_t drafted, accepted;  /* draft tokens proposed / accepted               */
    int64_t emitted;            /* tokens emitted, the prefill's first included   */
    int64_t target_forwards;    /* prefill (1) + rounds                           */
    int64_t tried[NX_SPEC_MAX_DRAFT];    /* drafts at position i that were checked */
    int64_t hits[NX_SPEC_MAX_DRAFT];     /* ... and accepted                       */
    double prefill_s, draft_s, verify_s, commit_s;
} nx_spec_stats;

/* d may be NULL: plain decoding through the same interface. max_ctx is the
 * positions the session's caches hold: every token but the last emitted one
 * goes through them, so prompt + generated tokens reach max_ctx + 1 at most
 * (a call that would need more positions is NX_ERANGE; drafts shorten near
 * the end). prefill and extend keep a position for the token they produce: a
 * prompt takes max_ctx - 1 tokens at most (absorb, whose last token is the
 * pending one, max_ctx). Free with nx_spec_free. */
nx_status nx_spec_new(const nx_model *m, const nx_drafter *d, int max_ctx, const nx_spec_opts *opts, nx_spec **out,
                      char *err, size_t errlen);
/* What nx_spec_new would refuse in (d, max_ctx, opts), checked without making
 * a session (NX_EINVAL; the message without nx_spec_new's "spec: "). */
nx_status nx_spec_check_opts(const nx_model *m, const nx_drafter *d, int max_ctx, const nx_spec_opts *opts, char *err,
                             size_t errlen);
void nx_spec_free(nx_spec *s);
/* Releases the session's buffers; every later call is NX_ESTATE. */
void nx_spec_close(nx_spec *s);
/* Starts s over, from any state but closed, as nx_spec_new with its model,
 * drafter and max_ctx and these opts would: FRESH, no tokens, statistics
 * zeroed; its outputs from here are those of a new session. Its buffers are
 * kept where they serve (a draft block no longer than before; logprob rows
 * where opts want them and s has them), else allocated anew. Allocating is
 * most of what nx_spec_new costs -- first touches of ~100 MB for a
 * 1024-token session of the 0.8B shape, 0.01-0.3 s on the 2-core VM
 * depending on the 2 MB pages the kernel has free -- so a server reuses its
 * sessions. Errors (bad opts: as nx_spec_new; NX_ENOMEM; NX_ESTATE when
 * closed) leave s as it was. */
nx_status nx_spec_renew(nx_spec *s, const nx_spec_opts *opts, char *err, size_t errlen);

nx_status nx_spec_prefill(nx_spec *s, const int32_t *prompt, int n, int32_t *first, char *err, size_t errlen);
/* Proposes up to k drafts (k <= 0: none, and nothing changes). */
nx_status nx_spec_draft(nx_spec *s, int k, int32_t *drafts, int *n_drafts, char *err, size_t errlen);
nx_status nx_spec_verify(nx_spec *s, char *err, size_t errlen);
/* Emits the round's tokens (1 .. K+1; fewer when a stop id comes first). */
nx_status nx_spec_commit(nx_spec *s, int32_t *emitted, int *n_emitted, char *err, size_t errlen);
/* One round with the configured draft length, emitting at most max_emit
 * (>= 1) tokens into emitted. */
nx_status nx_spec_step(nx_spec *s, int max_emit, int32_t *emitted, int *n_emitted, char *err, size_t errlen);

/* Many sessions of one model, one forward: nx_spec_step_batch runs one round
 * of every session like nx_spec_step (each with its own draft length), but
 * verifies all their blocks in one target forward and runs their drafter
 * steps together, so each weight matrix -- the target's, the MTP head's and
 * the LM head the drafts are scored with -- is read once per step for the
 * whole batch (up to 32 rows a forward; more take more forwards). Every session's output is exactly what
 * nx_spec_step would give it. The batch object holds the forward's output
 * rows; reuse it across rounds. */
typedef struct nx_spec_batch nx_spec_batch;
/* max_ctx: the longest session context whose drafting joins the batch (the
 * others draft on their own, with the same result). */
nx_status nx_spec_batch_new(const nx_model *m, int max_ctx, nx_spec_batch **out, char *err, size_t errlen);
void nx_spec_batch_free(nx_spec_batch *b);
/* ss[0..n), n <= 64: READY sessions of b's model, each at most once. Session i emits
 * at most max_emit[i] tokens into emitted + i * (NX_SPEC_MAX_DRAFT + 1),
 * *n_emitted[i] of them; st[i] is its status (as nx_spec_step's) and
 * msgs + i * msglen its message. Returns NX_OK (NX_EINVAL, touching nothing,
 * for n > 64); the per-session statuses say the rest. */
nx_status nx_spec_step_batch(nx_spec_batch *b, nx_spec *const *ss, int n, const int *max_emit, int32_t *emitted,
                             int *n_emitted, nx_status *st, char *msgs, size_t msglen);

/* Continues a READY sequence with more input (the next user turn): runs the
 * pending token and tokens[0..n) through the target and the drafter and
 * emits the next token in *first. n may be 0. */
nx_status nx_spec_extend(nx_spec *s, const int32_t *tokens, int n, int32_t *first, char *err, size_t errlen);
/* Reads input whose continuation is already known, without sampling: a
 * prompt taken in pieces, or the part of one before a cache checkpoint. From
 * FRESH (n >= 2) it runs tokens[0..n-1); from READY the pending token and
 * tokens[0..n-1) (n >= 1). Either way tokens[n-1] becomes the pending token
 * and the session is READY, exactly as if tokens[n-1] had been emitted, so a
 * later extend (or a checkpoint) continues from there. Nothing is emitted. */
nx_status nx_spec_absorb(nx_spec *s, const int32_t *tokens, int n, char *err, size_t errlen);

/* Checkpoints (the reference's capture/restore). nx_spec_save writes a READY
 * session at its committed boundary: the sequence, the target state (KV rows,
 * conv and recurrent state) and the drafter's entries, namespaced by the
 * artifact identities of the model and drafter, with a checksum; written to
 * a file of its own beside path and renamed over it (a symbolic link's
 * target is replaced; a path that is not a regular file is refused,
 * NX_EINVAL; a new file has mode 0600, a replaced one keeps its mode).
 * nx_spec_load restores into a FRESH session made
 * for the same model and drafter with room for the sequence: a checkpoint of
 * another model or drafter is NX_EINVAL naming which, a damaged file
 * NX_EFORMAT, restoring into a used session NX_ESTATE; on failure the session
 * stays FRESH. */
nx_status nx_spec_save(const nx_spec *s, const char *path, char *err, size_t errlen);
nx_status nx_spec_load(nx_spec *s, const char *path, char *err, size_t errlen);
/* Whether nx_spec_save could write path now, without touching path: the
 * same link target and refusals, and a file made (and removed) beside the
 * target, as the save makes one. For a program to refuse a path before the
 * work whose result it would lose. */
nx_status nx_spec_save_check(const char *path, char *err, size_t errlen);
/* The same checkpoint in memory: nx_spec_snapshot returns the file's bytes
 * in *blob (the caller frees with nx_free), nx_spec_restore reads them back
 * with the checks and errors of nx_spec_load ("snapshot" names the source).
 * Saving and snapshotting change nothing the session means, but they may
 * finish work the last commit left for the next forward (the kept tokens'
 * state updates) on the model's threads: like every call on a session,
 * one at a time. */
nx_status nx_spec_snapshot(const nx_spec *s, void **blob, size_t *len, char *err, size_t errlen);
nx_status nx_spec_restore(nx_spec *s, const void *blob, size_t len, char *err, size_t errlen);
/* Tokens a checkpoint file holds (to size the session that loads it), or -1
 * if path is not a readable nextn checkpoint. */
int nx_spec_checkpoint_tokens(const char *path);

const nx_spec_stats *nx_spec_get_stats(const nx_spec *s);
/* The most drafts a round of this session proposes (0 without a drafter). */
int nx_spec_max_draft(const nx_spec *s);
/* 1 if the tokens a session with these options emits can depend on where and
 * how many drafts it runs: rejection sampling (NX_ACCEPT_DEFAULT resolves to
 * it at temperature > 0) of a distribution that is not one-hot (top-k 1).
 * Greedy and match acceptance emit plain decoding's tokens whatever the
 * drafts, so only there may K follow timings (NX_DRAFT_AUTO) without
 * changing which sample a seed gives. */
int nx_spec_drafts_shape_output(nx_accept_mode accept, const nx_sampling *sp);
/* Tokens of the sequence so far (prompt + emitted). */
int nx_spec_length(const nx_spec *s);
/* With opts.logprobs: the entries of the tokens the session's last call
 * emitted (prefill, extend, commit, step, step_batch), in order, *n of them
 * -- the same count that call reported (a stop id it emitted included). 0
 * and NULL when logprobs are off or the last call emitted nothing (draft,
 * verify, absorb, any failure). Valid until the session's next call. Each
 * verified position costs a copy of its logits row and passes over it
 * (maximum, normalizer, top-k): about 0.3-0.4 ms at a 248k vocabulary on
 * the 2-core CI machine. */
const nx_token_logprob *nx_spec_logprobs(const nx_spec *s, int *n);
/* With opts.input_logprobs: the entries of the input tokens the last
 * prefill, extend or absorb read, in order, *n of them: every token given
 * except the first of a fresh session (no row precedes it) -- a prefill of N
 * tokens has N - 1, an extend or absorb from READY of n tokens n, an absorb
 * from FRESH of n tokens n - 1. 0 and NULL when off or after other calls.
 * Valid until the session's next call. */
const nx_token_logprob *nx_spec_input_logprobs(const nx_spec *s, int *n);

/* ---- Engine: many requests, one model ---------------------------------- */

/* The serving engine owns one thread that runs every model forward. Requests
 * queue for one of `parallel` rows; each row is a speculative session
 * (nx_spec) with its own target state and drafter entries. Every scheduler
 * round gives each row in prefill one prompt piece (so running streams keep
 * flowing while a long prompt is read) and all decoding rows one round
 * together (nx_spec_step_batch: one target forward for all their verify
 * blocks); rows join after their prefill and leave when done or cancelled
 * without disturbing the others. A row's output does not depend on the other
 * rows: greedy and matched-sampling output is the same alone or in company.
 *
 * Prefix cache: a row resumes from the longest cached checkpoint whose tokens
 * begin its prompt (KV rows + Gated DeltaNet state + drafter entries, see
 * src/engine/cache.h), and leaves checkpoints at the request's cache_at
 * boundaries and at its end, in RAM (LRU byte budget) and optionally on disk.
 *
 * Sessions: a row's session outlives its request and is renewed for the
 * next one (nx_spec_renew), so a request that arrives does not stall the
 * running streams for a session's allocation; the engine keeps up to
 * `parallel` of them (the memory of its busiest moment) until it is freed.
 *
 * Thread safety: every nx_engine_* and nx_request_* call may come from any
 * thread; one thread at a time per request. */
typedef struct nx_engine nx_engine;
typedef struct nx_request nx_request;

#define NX_CACHE_POINTS 2          /* checkpoint boundaries a request may name */

/* Whether a round of the decoding rows drafts. */
typedef enum {
    NX_DRAFTS_ADAPTIVE = 0,    /* measure rounds with and without drafts for each
                                  number of rows and run the faster (the default:
                                  in a batch on a CPU, drafts can cost more than
                                  they give); greedy and NX_ACCEPT_MATCH output
                                  is the same either way (rejection sampling's
                                  is not: it depends on where drafts sat)      */
    NX_DRAFTS_ALWAYS           /* every round drafts as configured              */
} nx_draft_policy;

typedef struct {
    int parallel;              /* rows decoded together (default 4)            */
    int max_ctx;               /* tokens per row: prompt + output (default 4096) */
    int max_queue;             /* requests waiting beyond the rows; more are
                                  refused with NX_EBUSY (default 64)           */
    int prefill_chunk;         /* prompt tokens a row reads per round (default
                                  64): running streams wait at most one piece  */
    int draft;                 /* drafts per round (nx_spec_opts.draft); ignored
                                  without a drafter                            */
    size_t cache_ram_bytes;    /* RAM tier budget; 0 with no cache_dir: no cache */
    const char *cache_dir;     /* disk tier directory, or NULL                 */
    size_t cache_disk_bytes;   /* disk tier budget (least recently used files
                                  deleted beyond it); 0: no limit              */
    void (*log)(void *ctx, const char *line);   /* engine messages, or NULL    */
    void *log_ctx;
    nx_draft_policy draft_policy;
} nx_engine_opts;

/* m and d (d may be NULL: plain decoding) must outlive the engine. The
 * engine's thread starts here. Free with nx_engine_free. */
nx_status nx_engine_new(const nx_model *m, const nx_drafter *d, const nx_engine_opts *opts, nx_engine **out,
                        char *err, size_t errlen);
/* Cancels every queued and running request, stops the thread, frees the
 * engine. Requests not yet freed by their owners stay valid (finished as
 * NX_FINISH_CANCELLED) until nx_request_free. */
void nx_engine_free(nx_engine *e);

typedef struct {
    const int32_t *prompt;     /* copied                                        */
    int n_prompt;              /* >= 1                                          */
    int cache_at[NX_CACHE_POINTS]; /* prefix lengths worth a checkpoint (e.g.
                                  the conversation before the generation
                                  prompt; the system prompt), 0: none           */
    int max_tokens;            /* tokens to generate at most; <= 0: up to the context */
    nx_sampling sampling;
    nx_accept_mode accept;
    nx_draft_pick draft_pick;  /* nx_spec_opts.draft_pick                       */
    const int32_t *stop_ids;   /* ids that end the output (besides the model's eos) */
    int n_stop;
    /* Called by the engine's thread whenever the request has new output or
     * has finished (NULL: none): an event loop's cue to read. It runs under
     * the request's lock -- it must not call nx_request_* -- and never after
     * nx_request_free has returned. */
    void (*notify)(void *ctx);
    void *notify_ctx;
    int logprobs;              /* 1: keep each output token's nx_token_logprob
                                  (nx_request_read_logprobs)                    */
    int top_logprobs;          /* with logprobs or prompt_logprobs: 0..NX_MAX_TOP_LOGPROBS */
    int prompt_logprobs;       /* 1: score the prompt too: the entries of its
                                  tokens after the first
                                  (nx_request_read_prompt_logprobs). The prompt
                                  is read without the prefix cache, every row's
                                  logits computed (nx_spec_opts.input_logprobs) */
} nx_request_opts;

typedef enum {
    NX_FINISH_NONE = 0,        /* still running                                 */
    NX_FINISH_STOP,            /* a stop id came (not part of the output)      */
    NX_FINISH_LENGTH,          /* max_tokens or the context                     */
    NX_FINISH_CANCELLED,       /* nx_request_cancel, or the engine shut down    */
    NX_FINISH_ERROR            /* see nx_request_info.error                     */
} nx_finish;

/* Queues a request. NX_EBUSY when the queue is full, NX_ERANGE when the
 * prompt does not fit the context, NX_EINVAL for bad ids or options. The
 * caller owns *out and frees it with nx_request_free. */
nx_status nx_engine_submit(nx_engine *e, const nx_request_opts *o, nx_request **out, char *err, size_t errlen);

/* Waits up to timeout_ms (< 0: forever) for output the caller has not seen;
 * copies up to cap new token ids into ids and returns how many. *finish is
 * set to the finish reason once the request ended and every token was read
 * (NX_FINISH_NONE before). */
int nx_request_read(nx_request *r, int32_t *ids, int cap, int timeout_ms, nx_finish *finish);
/* nx_request_read, plus the tokens' log-probabilities: lp[i] for ids[i]
 * when the request was submitted with logprobs (lp may be NULL; without
 * logprobs it is not written). */
int nx_request_read_logprobs(nx_request *r, int32_t *ids, nx_token_logprob *lp, int cap, int timeout_ms,
                             nx_finish *finish);
/* With prompt_logprobs: copies up to cap of the prompt's entries computed so
 * far (for its tokens 1 .. n_prompt-1, in order) into lp and returns how
 * many. All n_prompt - 1 are there once the first output token or the finish
 * has been read (fewer only if the request failed or was cancelled before
 * its prompt was read). */
int nx_request_read_prompt_logprobs(nx_request *r, nx_token_logprob *lp, int cap);
/* Asks the engine to stop the request; its row is freed at the next round. */
void nx_request_cancel(nx_request *r);
/* Cancels the request if it still runs and releases the caller's hold. */
void nx_request_free(nx_request *r);

typedef struct {
    int prompt_tokens, cached_tokens, completion_tokens;
    int64_t drafted, accepted;
    double queue_s, ttft_s, total_s;   /* seconds: waiting, submit to first token, submit to end */
    char error[512];
} nx_request_info;
void nx_request_get_info(nx_request *r, nx_request_info *out);

typedef struct {
    int64_t requests, finished, cancelled, errors, rejected;
    int active, prefilling, queued;    /* now                                   */
    int64_t prompt_tokens, cached_tokens, generated_tokens;
    int64_t rounds;                    /* decode rounds over all rows            */
    int64_t row_rounds;                /* sum of active rows per scheduler round */
    int64_t sched_rounds;              /* scheduler rounds that decoded          */
    double decode_s;                   /* seconds spent in decode rounds         */
    int64_t drafted, accepted;
    int64_t tried[NX_SPEC_MAX_DRAFT], hits[NX_SPEC_MAX_DRAFT];
    int64_t cache_hits, cache_misses, cache_hit_tokens, cache_entries, cache_ram_bytes, cache_disk_bytes;
    int64_t cache_evictions;           /* RAM copies dropped for the RAM budget */
    int64_t cache_disk_evictions;      /* files deleted for the disk budget     */
    int64_t cache_bad_files;
} nx_engine_stats;
void nx_engine_get_stats(nx_engine *e, nx_engine_stats *out);

/* ---- Output files ------------------------------------------------------ */

/* Whether fopen(path, "w") could succeed now, checked without touching
 * path: an existing file (or device, not a directory) must be writable;
 * otherwise a file is made, and removed at once, where path would be
 * created (for a symbolic link, at the file it points to, which need not
 * exist yet). NX_EIO naming path and the reason. For a program to refuse an
 * output path before the work it would come after (a server's port file
 * once it listens); a checkpoint's path has nx_spec_save_check. */
nx_status nx_write_check(const char *path, char *err, size_t errlen);

/* ---- Memory returned by the library ------------------------------------ */

/* Frees a buffer a library call returned to the caller (token id arrays,
 * rendered text). NULL is a no-op. */
void nx_free(void *p);

/* ---- Tokenizer --------------------------------------------------------- */

/* A byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (the
 * Qwen family): vocabulary and merges, added/special tokens, NFC normalizer,
 * the Split pre-tokenizer regex read from the file, ByteLevel mapping and
 * decoder. Immutable after loading except for an internal cache that is
 * protected, so one tokenizer may serve several threads at once. */
typedef struct nx_tokenizer nx_tokenizer;

/* Loads dir/tokenizer.json, plus dir/tokenizer_config.json (chat template,
 * eos token) when present. Anything in the file that is not supported is an
 * NX_EUNSUPPORTED error naming it; malformed files are NX_EFORMAT naming the
 * file and field. Free with nx_tokenizer_free. */
nx_status nx_tokenizer_load(const char *dir, nx_tokenizer **out, char *err, size_t errlen);
void nx_tokenizer_free(nx_tokenizer *t);

/* How added tokens written in the text are treated by nx_tokenize. */
typedef enum {
    NX_SPECIAL_PARSE = 0,   /* every added token matches (HF default)               */
    NX_SPECIAL_AS_TEXT = 1, /* only non-special added tokens (<think>, <tool_call>,
                               ...) match; special ones (<|im_start|>, ...) are text
                               (HF split_special_tokens=True, llama.cpp parse_special=false) */
    NX_SPECIAL_NONE = 2     /* no added token matches: NFC, split, BPE over all text */
} nx_special_mode;

/* Encodes len bytes of UTF-8 text. *ids receives a buffer of *n ids that
 * the caller frees with nx_free (NULL when *n is 0). Invalid UTF-8 in the
 * input is NX_EINVAL naming the byte offset. No BOS/EOS is added. */
nx_status nx_tokenize(nx_tokenizer *t, const char *text, size_t len, nx_special_mode mode,
                      int32_t **ids, int *n, char *err, size_t errlen);

/* The offset of the first byte of text[0..len) that is not valid UTF-8, or
 * len when all of it is -- the rule nx_tokenize applies (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF). For callers that
 * check a text where it is read, to name its source in an error. */
size_t nx_utf8_check(const char *text, size_t len);

/* Decodes ids to text (a NUL-terminated buffer the caller frees with nx_free;
 * *len, if not NULL, gets its length). Byte sequences that are not valid
 * UTF-8 become U+FFFD as in Hugging Face's decoder; unknown ids are skipped.
 * skip_special drops special added tokens. */
nx_status nx_detokenize(const nx_tokenizer *t, const int32_t *ids, int n, int skip_special,
                        char **text, size_t *len, char *err, size_t errlen);

/* Streaming decode: push ids one at a time; each push returns the text that
 * became complete (never a partial UTF-8 sequence: an incomplete tail is held
 * until its continuation arrives). The returned pointer is owned by the
 * stream and valid until the next call. nx_detok_stream_flush returns what
 * is still held (incomplete bytes become U+FFFD). */
typedef struct nx_detok_stream nx_detok_stream;
nx_status nx_detok_stream_new(const nx_tokenizer *t, int skip_special, nx_detok_stream **out,
                              char *err, size_t errlen);
void nx_detok_stream_free(nx_detok_stream *s);
const char *nx_detok_stream_push(nx_detok_stream *s, int32_t id, size_t *len);
const char *nx_detok_stream_flush(nx_detok_stream *s, size_t *len);

/* The bytes token id decodes to on its own (not NUL-terminated; a piece of
 * a UTF-8 character for some tokens), *len of them, pointing into the
 * tokenizer; NULL for an id outside the vocabulary or unused. */
const char *nx_tokenizer_token_bytes(const nx_tokenizer *t, int32_t id, size_t *len);
/* Vocabulary size (largest id + 1, added tokens included). */
int nx_tokenizer_vocab_size(const nx_tokenizer *t);
/* The id of a token string (vocabulary or added token), or -1. */
int32_t nx_tokenizer_token_id(const nx_tokenizer *t, const char *token);
/* 1 if id is a special added token (special: true in tokenizer.json). */
int nx_tokenizer_is_special(const nx_tokenizer *t, int32_t id);
/* Stop ids known to the tokenizer files: tokenizer_config.json's eos_token
 * and <|im_end|> / <|endoftext|> when they exist. Returns the count; *ids points
 * into the tokenizer. */
int nx_tokenizer_stop_ids(const nx_tokenizer *t, const int32_t **ids);
/* The chat_template string from tokenizer_config.json (or dir/chat_template.jinja),
 * or NULL. Owned by the tokenizer. */
const char *nx_tokenizer_chat_template(const nx_tokenizer *t);

/* ---- Chat template ----------------------------------------------------- */

/* Renders conversations the way a checkpoint's Jinja chat template does, for
 * the Qwen ChatML template family, implemented natively (no Jinja engine).
 * The variant is detected from the template text; see docs/chat-templates.md. */
typedef struct nx_chat_template nx_chat_template;

/* Parses template text (a Jinja chat template of a known variant, or a file
 * in the documented nextn format). Unknown → NX_EUNSUPPORTED with a message
 * pointing to `--chat-template FILE` and the documented format. `name` is used
 * in messages. Free with nx_chat_template_free. */
nx_status nx_chat_template_new(const char *text, size_t len, const char *name, nx_chat_template **out,
                               char *err, size_t errlen);
void nx_chat_template_free(nx_chat_template *c);
/* "qwen3", "qwen3.5", ... */
const char *nx_chat_template_variant(const nx_chat_template *c);
/* The template's default for enable_thinking when the caller does not set it
 * (1: the generation prompt opens a <think> block). */
int nx_chat_template_default_thinking(const nx_chat_template *c);

typedef struct {
    const char *messages_json;   /* a JSON array of OpenAI-style messages        */
    const char *tools_json;      /* a JSON array of tools, or NULL (not passed)  */
    int add_generation_prompt;
    int enable_thinking;         /* -1: not passed (template default), 0, 1      */
} nx_chat_request;

/* Renders to a NUL-terminated buffer the caller frees with nx_free.
 * Malformed JSON is NX_EFORMAT; a conversation the template rejects is
 * NX_EINVAL with the template's own message (e.g. "No user query found in
 * messages."). */
nx_status nx_chat_render(const nx_chat_template *c, const nx_chat_request *req, char **out,
                         char *err, size_t errlen);

/* ---- HTTP server ---------------------------------------------------------- */

/* An OpenAI-compatible HTTP server over an engine (libmicrohttpd: an epoll
 * loop on a small thread pool; a connection waiting for tokens is parked, not
 * a blocked thread): POST /v1/chat/completions and /v1/completions (streamed as
 * server-sent events, or whole), POST /tokenize and /detokenize, GET
 * /v1/models, /v1/models/ID, /health and /metrics (Prometheus text).
 * docs/server.md lists the fields and errors. */
typedef struct nx_server nx_server;

typedef struct {
    const char *host;          /* address to bind (default "127.0.0.1")        */
    int port;                  /* 0: any free port (see nx_server_port)         */
    const char *api_key;       /* non-NULL: every /v1/ path, /tokenize,
                                  /detokenize and /metrics need
                                  "Authorization: Bearer KEY" (else 401);
                                  "" is refused (NX_EINVAL)                    */
    const char *model_name;    /* the id /v1/models lists (default "nextn")     */
    size_t max_body;           /* request body limit in bytes (default 4 MiB)   */
    int max_connections;       /* default 64                                    */
    int max_ctx;               /* the engine's context (for 400s on overflow)   */
    nx_engine *engine;         /* these three must outlive the server          */
    nx_tokenizer *tokenizer;
    const nx_chat_template *chat_template;   /* NULL: chat requests get a 400  */
    void (*log)(void *ctx, const char *line);
    void *log_ctx;
} nx_server_opts;

/* Binds and starts serving. Free with nx_server_stop. */
nx_status nx_server_start(const nx_server_opts *opts, nx_server **out, char *err, size_t errlen);
/* The port the server listens on. */
int nx_server_port(const nx_server *s);
/* Stops accepting connections, ends open streams (their requests are
 * cancelled and each stream closes with its final chunk and [DONE]), waits
 * for the connection threads and frees the server. NULL is a no-op. */
void nx_server_stop(nx_server *s);

#ifdef __cplusplus
}
#endif
#endif
