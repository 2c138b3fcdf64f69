/* model.h — the loaded Qwen3.5 target model and per-sequence state (internal).
 *
 * nx_model is immutable after nx_model_load: the config, read-only weight
 * views into the mapped checkpoint (kn_mat), and small f32 vectors the loader
 * derived once (norm weights with the zero-centered +1 applied for raw HF
 * files, conv taps, -exp(A_log), dt_bias). Big matrices are never copied
 * unless a file stores one misaligned for its element type (then one aligned
 * copy is made at load and listed in `copies`).
 *
 * nx_state holds everything one sequence mutates; its shapes are in the field
 * comments. Scratch for one chunk of up to MDL_CHUNK tokens lives there too,
 * so a forward call never allocates. */
#ifndef NX_MODEL_MODEL_H
#define NX_MODEL_MODEL_H

#include "base/pool.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "nextn.h"

/* Tokens per internal forward chunk. Weight rows are streamed once per chunk,
 * so bigger chunks amortise memory traffic; 32 rows of activations of the
 * widest projection (I = 3584 floats for 0.8B, 448 KiB) still fit in L2. */
#define MDL_CHUNK 32
/* Tokens of one sequence whose attention shares one pass over a KV head's
 * cache (kn_attention's block): a verify of up to 8 tokens reads its cache
 * once; the scores scratch grows with it. */
#define MDL_ATTN_TOKENS 8

typedef struct {
    int is_full;                  /* full attention (1) or Gated DeltaNet (0) */
    float *input_norm;            /* [H] effective weight                      */
    float *post_norm;             /* [H]                                       */
    /* full attention */
    kn_mat q_proj;                /* [Nh*hd*(1+gate), H] per head: query | gate */
    kn_mat k_proj, v_proj;        /* [Nkv*hd, H]                               */
    kn_mat o_proj;                /* [H, Nh*hd]                                */
    float *q_norm, *k_norm;       /* [hd]                                      */
    /* Gated DeltaNet */
    kn_mat in_qkv;                /* [CD, H]  rows: q (KD) | k (KD) | v (VD)   */
    kn_mat in_z;                  /* [VD, H]                                   */
    kn_mat in_b, in_a;            /* [Hv, H]                                   */
    kn_mat out_proj;              /* [H, VD]                                   */
    float *conv_w;                /* [Kc][CD]: tap j of channel c at j*CD + c  */
    float *dt_bias;               /* [Hv]                                      */
    float *neg_exp_a;             /* [Hv]  -exp(A_log)                         */
    float *gnorm;                 /* [Dv]  gated norm weight (never +1)        */
    /* SwiGLU MLP */
    kn_mat gate_proj, up_proj;    /* [I, H]                                    */
    kn_mat down_proj;             /* [H, I]                                    */
} mdl_layer;

/* The weight matrices of a layer, in forward order; the slots of the other
 * mixer kind are zero views (data NULL). */
#define MDL_LAYER_MATS 12
static inline int mdl_layer_mats_mut(mdl_layer *L, kn_mat *out[MDL_LAYER_MATS]) {
    kn_mat *m[MDL_LAYER_MATS] = {&L->q_proj, &L->k_proj, &L->v_proj,    &L->o_proj,    &L->in_qkv,  &L->in_z,
                                 &L->in_b,   &L->in_a,   &L->out_proj, &L->gate_proj, &L->up_proj, &L->down_proj};
    for (int i = 0; i < MDL_LAYER_MATS; i++) out[i] = m[i];
    return MDL_LAYER_MATS;
}
static inline void mdl_layer_mats(const mdl_layer *L, const kn_mat *out[MDL_LAYER_MATS]) {
    kn_mat *m[MDL_LAYER_MATS];
    mdl_layer_mats_mut((mdl_layer *)L, m);   /* only read through out */
    for (int i = 0; i < MDL_LAYER_MATS; i++) out[i] = m[i];
}

/* Blocks a loader allocated (f32 vectors, aligned copies of misaligned
 * tensors), freed together with their owner. */
typedef struct {
    void **blocks;
    int n;
} mdl_owned;

void mdl_owned_free(mdl_owned *o);

/* Packs each lanes matrix among mats[0 .. n-1] (kn_lanes_pack; the others
 * are skipped) into one block owned by `owned`, on the pool's threads, points
 * their kn_mat.packed at it, and releases the pages of its codes, scales and
 * biases in st's mappings (st_release; st may be NULL, and parts outside
 * them, such as a loader's aligned copies, stay). NX_ENOMEM when the block
 * cannot be had, and then nothing is packed or released. The one part of a load
 * that is not an mmap: for the 0.8B shape at 4 bits, 424 MB packed in place
 * of as many mapped, and 0.2-0.9 s on the 2-core VM, mostly faulting the
 * block in; at 8 bits 850 MB, a load 0.66-0.82 s instead of 0.38 s (with
 * outliers to 1.5 s). */
nx_status mdl_pack_mats(nx_pool *pool, mdl_owned *owned, const st_set *st, kn_mat *const mats[], int n, char *err,
                        size_t errlen);

struct nx_model {
    cfg_model cfg;
    char *dir;
    st_set *st;
    nx_pool *pool;
    int layout_mlx;               /* 1: norms already store 1+w (mlx-community) */
    int f32_activations;          /* nx_load_opts: no int8 activations          */
    nx_dtype kv_dtype;            /* nx_load_opts.kv_cache: NX_DT_F32 or NX_DT_F16 */
    int pack_lanes;               /* SIMD int8 products: lanes matrices get packed rows (mdl_pack_mats) */
    const char *prefix;           /* tensor name prefix of the language model  */
    kn_mat embed;                 /* [V, H]                                    */
    kn_mat lm_head;               /* [V, H] (the embedding when tied)          */
    float *final_norm;            /* [H]                                       */
    mdl_layer *layers;            /* [L]                                       */
    mdl_owned owned;              /* the f32 vectors above, aligned copies     */
    uint64_t identity;            /* artifact identity: config + tensor index  */
    nx_model_info info;
    char layer_pattern[CFG_MAX_LAYERS + 1];
    char weight_dtype[96];
    char quant_desc[80];
    int n_mtp_tensors;
};

/* Scratch for one chunk of up to MDL_CHUNK rows, shared by every layer of a
 * forward (the target's and the MTP head's). */
typedef struct {
    int max_ctx;                  /* positions the attention scores can cover  */
    float *x;                     /* [C][H] residual stream                    */
    float *xn;                    /* [C][H] normed input of a block            */
    float *proj;                  /* [C][max(2*Nh*hd, CD)] q/gate or qkv        */
    float *kbuf, *vbuf;           /* [C][Nkv*hd]                               */
    float *zbuf;                  /* [C][VD]                                   */
    float *bbuf, *abuf;           /* [C][Hv]                                   */
    float *conv_out;              /* [C][CD]                                   */
    float *mix;                   /* [C][max(Nh*hd, VD)] attention / GDN output */
    float *ff1, *ff2;             /* [C][I]                                    */
    float *out;                   /* [C][H] block output before the residual   */
    float *hfinal;                /* [C][H] post-final-norm                    */
    float *rope;                  /* [C][rd] cos/sin table per chunk row        */
    /* [n_threads][MDL_ATTN_TOKENS * heads per KV head * max_ctx]: a block's
     * score rows, n0 + T apart (kn_attention). At the 0.8B shape 128 bytes
     * per thread per position, against 24 KB per position of KV cache. */
    float *scores;
    void *qx;                     /* kn_qx buffer: int8 activations of C rows of the widest linear input */
} mdl_scratch;

nx_status mdl_scratch_init(mdl_scratch *sc, const nx_model *m, int max_ctx);
void mdl_scratch_free(mdl_scratch *sc);

/* Rollback record of the last verify block (mdl_forward_verify): enough to
 * put every Gated DeltaNet layer back to its state after any prefix of the
 * block (spec §4, option 2, replay). The verify writes each layer's state
 * after the block to a buffer of its own and keeps the state from before it
 * in prior, with each token's k, delta and alpha; a rollback takes prior back
 * and the kept tokens' state updates are applied again (the deltas the
 * verify recorded: no dot products), by the next forward (pending below).
 * Why not a snapshot per token (option
 * 1): each is 18 MB a layer stack at the 0.8B shape, written on every verify
 * (and read for ownership first), while a replay reads and writes one state
 * stack, and only when a draft was rejected. Measured on the 0.8B shape at
 * 4 bits, K = 3: the verify 41.4-43.1 ms with snapshots, 35.5-37.8 with them
 * switched off; whole MTP runs 0.92-0.95x the time (bench/RESULTS.md). */
typedef struct {
    int max_block;                /* longest block that can be recorded        */
    int T;                        /* tokens in the recorded block; 0: none     */
    int pos;                      /* state position before the block           */
    /* per GDN layer (NULL for attention layers) */
    float **prior;                /* [Hv][Dv][Dk] the state before the block; the
                                     spare buffer a verify writes to otherwise */
    float **replay;               /* [max_block][mdl_replay_row] recurrence record */
    /* A rollback to keep < T tokens leaves the kept tokens' updates of each
     * GDN layer's state to the next forward, whose recurrence job applies
     * them to each head it is about to read (mdl_seg.kept), so that the
     * state is read and written once instead of once more for a replay of
     * its own; mdl_state_settle applies them at once for other readers.
     * kept is the other half of the replay records: the rollback exchanges
     * the two, so the next verify records into the one not pending. Against
     * a replay at the rollback (MTP sessions at K = 3 on the q4 fixture,
     * both ways in turn in one process, 40 and 60 blocks of 12 rounds):
     * commit 2.58 -> 2.08 and 2.44 -> 1.93 ms a round, verify level (24.7
     * -> 24.9, 24.2 -> 24.1 ms), tokens a second 1.009x and 1.024x. */
    float **kept;                 /* [max_block][mdl_replay_row] a rolled-back record */
    int pending;                  /* its first `pending` tokens not yet applied */
    /* The conv log: [log_rows][CD] pre-conv rows where the conv state lives
     * while a record can be made. A forward appends its rows after the
     * state's Kc-1 (moving those to the front first when the rest would not
     * fit) and the state moves up by T rows, so the rows a rollback needs
     * stay where they are: the conv state after token keep - 1 of a block
     * of T lies T - keep rows below the state after it, and no row is
     * copied to record or restore it. Against a copy of the block's window in the record and a copy
     * back at rollback, a verify of 4 with its rollback to 2 took 0.98x the
     * time (bench/RESULTS.md). */
    float **conv_log;             /* [log_rows][CD]                             */
    int log_rows;                 /* 2 (Kc-1 + max_block)                       */
    void *block;                  /* prior, both records and the log of every layer */
} mdl_rollback;

struct nx_state {
    const nx_model *m;
    int pos;                      /* tokens held                               */
    int max_ctx;
    /* per full-attention layer l (indexed by layer; NULL for GDN layers) */
    void **k_cache;               /* [Nkv] K tiles of mdl_kv_cap(max_ctx) positions of m->kv_dtype,
                                     post-norm post-RoPE K (mdl_kv)           */
    void **v_cache;               /* [Nkv][mdl_kv_cap(max_ctx)][hd]            */
    /* per GDN layer (NULL for attention layers) */
    float **conv_state;           /* [Kc-1][CD] last pre-conv rows: conv_home, or
                                     rows of rb.conv_log while it exists       */
    float **conv_home;            /* the conv state's rows in block            */
    float **recurrent;            /* [Hv][Dv][Dk]                              */
    void *block;                  /* the caches and states above, one block (the
                                     verify swaps recurrent[l] with rb.prior[l]:
                                     each block is freed whole)                 */
    mdl_scratch sc;
    mdl_rollback rb;              /* allocated by mdl_state_enable_rollback    */
};

/* ---- binding checked tensors (load.c), shared with the MTP loader ------ */

/* Where tensors come from and where derived blocks go. */
typedef struct {
    const st_set *st;
    const char *dir;              /* for messages                              */
    mdl_owned *owned;
    char *err;
    size_t errlen;
    const cfg_model *quant;       /* quantization block affine tensors must agree
                                     with; NULL: their shapes alone decide     */
} mdl_binder;

/* A [rows, cols] matrix used in place (copied only when misaligned): F32,
 * BF16 or F16, or MLX affine-quantized when <module>.scales exists beside
 * <module>.weight (spec §2.6.1): weight U32 [rows, cols*bits/32], scales and
 * biases [rows, cols/group]; bits and group are read off the shapes and must
 * agree with b->quant. A missing tensor, another shape or dtype is an error
 * naming the tensor; `why` says what the config expects. */
nx_status mdl_bind_mat(mdl_binder *b, const char *name, int64_t rows, int64_t cols, const char *why, kn_mat *out);

/* A vector of n floats converted to f32; plus_one adds 1 to every element
 * (zero-centred norm stored raw). */
nx_status mdl_bind_vec(mdl_binder *b, const char *name, int64_t n, int plus_one, const char *why, float **out);
/* A decoder layer with gated full attention and a SwiGLU MLP whose tensors
 * are named <prefix>input_layernorm.weight, <prefix>self_attn.q_proj.weight,
 * ... (the target's layer i, or the MTP head's mtp.layers.0.). */
nx_status mdl_bind_attention_layer(mdl_binder *b, const cfg_model *c, const char *prefix, int plus_one, mdl_layer *L);

/* ---- decoder layers (layer.c), shared by the target and the MTP head ---- */

/* y[T][w.rows] = x[T][w.cols] W^T, rows split across the model's pool;
 * T <= MDL_CHUNK. A quantized W multiplies x rounded to int8 in sc->qx
 * (kernels/quant.h) unless the model was loaded with f32_activations. */
void mdl_linear(const nx_model *m, mdl_scratch *sc, const kn_mat *w, const float *x, int T, float *y);
/* ys[i] = x ws[i]^T for i < n <= 4 matrices that read the same x (equal
 * cols): x is rounded to int8 once, and one pool run splits all their rows
 * (matrices whose activations differ, in mixed-precision checkpoints, run one
 * by one). The same results as n mdl_linear calls. */
void mdl_linears(const nx_model *m, mdl_scratch *sc, const float *x, int T, int n, const kn_mat *const ws[],
                 float *const ys[]);
/* y[idx[j]] = row idx[j] of W times x (one row of w.cols) for j < k: the
 * bits mdl_linear gives those rows, the others untouched. idx ascending;
 * the pool splits the k rows. */
void mdl_linear_at(const nx_model *m, mdl_scratch *sc, const kn_mat *w, const float *x, const int32_t *idx, int64_t k,
                   float *y);
/* RoPE tables for positions pos..pos+T-1 into rows row0.. of sc->rope. */
void mdl_rope_rows(const nx_model *m, mdl_scratch *sc, int row0, int pos, int T);
/* One attention layer's KV cache of cap positions (a multiple of
 * KN_KTILE: mdl_kv_cap), head by head: KV head h's V row for position p is
 * at element (h * cap + p) * hd of v, its K tiles (attention.h's kn_k_elem)
 * from element h * cap * hd of k, elements of dtype. Each head's rows are
 * one run of memory, which attention streams (rows of all heads interleaved
 * by position cost it a third more at 3000 positions: cache lines of one
 * head were 2 KB apart, pages held 2 of its rows). */
typedef struct {
    void *k, *v;                  /* elements of dtype                         */
    int cap;
    nx_dtype dtype;               /* the model's kv_dtype: NX_DT_F32 or NX_DT_F16 */
} mdl_kv;

/* The cap of a cache for max_ctx positions: whole K tiles. */
static inline int mdl_kv_cap(int max_ctx) { return (int)kn_k_cap(max_ctx); }

/* Rows [row0, row0 + T) of a chunk that continue one sequence from position
 * pos, and the state of one layer they read and advance: a chunk may hold
 * several sequences (a batch), each its own segment, rows in segment order.
 * Rows never mix: every row's result is what the sequence alone would get. */
typedef struct {
    int row0, T, pos;
    mdl_kv kv;                          /* attention                             */
    float *conv_state, *recurrent;      /* Gated DeltaNet                        */
    /* a verify's record (NULL otherwise): the state after the segment goes
     * to recurrent_out, recurrent keeps the state before it */
    float *recurrent_out;               /* [Hv][Dv][Dk]                          */
    float *replay;                      /* [T][mdl_replay_row]: each token's
                                           k | delta | alpha                     */
    const float *kept;                  /* a rollback's record whose first
                                           n_kept tokens' updates recurrent does
                                           not hold yet: applied to each head
                                           before its steps (NULL: none)         */
    int n_kept;
    float *conv_log;                    /* NULL: the new conv state replaces
                                           conv_state in place; else Kc-1+T rows,
                                           conv_state itself or rows below it in
                                           its log, that take the state's rows and
                                           then the segment's (the new state: the
                                           last Kc-1 of them)                     */
} mdl_seg;

/* One pre-norm decoder layer with gated full attention over the rows of
 * sc->x (in place): x += Attn(rmsnorm0(x)); x += SwiGLU(rmsnorm0(x)). Each
 * segment's K/V are written at its positions pos..pos+T-1 and its row t
 * attends to positions 0..pos+t of its own cache. Needs sc->rope per row. */
void mdl_attention_segs(const nx_model *m, const mdl_layer *L, mdl_scratch *sc, const mdl_seg *segs, int nseg);
/* The same for one sequence in rows 0..T-1 (the MTP head). */
void mdl_attention_layer(const nx_model *m, const mdl_layer *L, mdl_scratch *sc, mdl_kv kv, int pos, int T);
/* Only the K/V writes of mdl_attention_layer for the T rows of sc->x, bit for
 * bit the values it would write: for rows whose outputs nobody reads (the
 * MTP head's committed entries, whose K/V later drafts attend to). */
void mdl_attention_kv(const nx_model *m, const mdl_layer *L, mdl_scratch *sc, mdl_kv kv, int pos, int T);
/* The same with a Gated DeltaNet mixer: each segment's conv state and
 * recurrent state advance by its T tokens; the conv state in place, or
 * with a conv_log into the log, where the new state is then conv_log + T
 * rows (the caller moves its pointer). A segment with a record (it has a
 * conv_log) leaves recurrent as it was and writes the state after its last
 * token to recurrent_out and each token's replay record (mdl_replay_row) to
 * replay. */
void mdl_gdn_segs(const nx_model *m, const mdl_layer *L, mdl_scratch *sc, const mdl_seg *segs, int nseg);
/* Floats of one token's record for a replay: k (key dim) as the recurrence
 * read it | delta (value dim: each value head's beta (v - alpha S k), as the
 * step computed it) | alpha (Hv), so that a replay redoes each kept step's
 * update of the state (kn_gated_delta_replay) without its dot products. */
int64_t mdl_replay_row(const cfg_model *c);
/* Applies the state updates of the first keep tokens of the rolled-back
 * record (rb.kept) again to every Gated DeltaNet layer's recurrent state,
 * which must hold the state from before the block: the state after token
 * keep - 1, bit for bit the one the verify computed (the same updates from
 * the same state with the deltas the verify computed). Heads of all layers
 * split over the pool. */
void mdl_gdn_replay(const nx_model *m, nx_state *s, int keep);

/* ---- verify and rollback (forward.c), used by the speculative decoder ---- */

/* Allocates the rollback record for blocks of up to max_block tokens
 * (max_block <= MDL_CHUNK). Setup-time; idempotent for a size it holds
 * already. Growing it while a verify's record is pending is NX_ESTATE (the
 * new record could not roll that block back). */
nx_status mdl_state_enable_rollback(nx_state *s, int max_block, char *err, size_t errlen);
/* nx_forward over one block of T <= max_block tokens that also records what
 * mdl_rollback_to needs. Any later forward forgets the record. */
nx_status mdl_forward_verify(const nx_model *m, nx_state *s, const int32_t *tokens, int T, const nx_forward_out *out,
                             char *err, size_t errlen);
/* One sequence's block in a batched forward. */
typedef struct {
    nx_state *s;
    const int32_t *tokens;
    int n;                        /* >= 1                                       */
    int record;                   /* keep the rollback record (n <= max_block)  */
    int prenorm;                  /* its hidden rows: the last layer's output
                                     before the final norm, not after         */
} mdl_batch_item;

/* Runs several sequences' blocks (distinct states of m, sum of n <=
 * MDL_CHUNK) as one chunk: every weight matrix is read once for all rows.
 * Each item advances its state exactly as nx_forward (record = 0) or
 * mdl_forward_verify (record = 1) on it alone would, bit for bit. logits
 * ([rows][V]) and hidden ([rows][H]; each item's kind of row) get every row,
 * item by item; either may be NULL. On error nothing changed. */
nx_status mdl_forward_batch(const nx_model *m, const mdl_batch_item *items, int n, float *logits, float *hidden, char *err,
                            size_t errlen);
/* Keeps only the first `keep` tokens (1 <= keep <= T) of the recorded block:
 * attention KV is trimmed, every GDN layer's recurrent and conv state is set
 * to its state after token keep-1. Bit-identical to having run only those
 * tokens. NX_ESTATE without a record. Consumes the record. With keep < T the
 * recurrent state's buffer is exchanged with rb.prior's and the kept tokens'
 * updates are left to the next forward (rb.pending; mdl_state_settle):
 * pointers taken earlier into s->recurrent[l] no longer name the state (nor
 * do they after a verify, which exchanges them too). */
nx_status mdl_rollback_to(nx_state *s, int keep, char *err, size_t errlen);
/* Applies the kept tokens' updates a rollback left pending (mdl_rollback),
 * for a reader of s->recurrent other than a forward (a snapshot). A no-op
 * when none are pending. */
void mdl_state_settle(nx_state *s);

/* The kernel set (kernels/matmul.h) nx_kernels k asks for; 0 if k is one of
 * the enum's values, else NX_EINVAL. */
nx_status mdl_kernels_isa(nx_kernels k, kn_isa *isa);

#endif
