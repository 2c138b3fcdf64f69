/* mtp.h — the native Qwen3.5 multi-token-prediction head (spec §5) and its
 * per-sequence rows (internal).
 *
 * One MTP entry at position p pairs the hidden row of position p with the
 * token at position p+1 and predicts the token at p+2 (spec §5.3):
 *
 *   u = [ rmsnorm0(embed(token); pre_fc_norm_embedding) ; rmsnorm0(h; pre_fc_norm_hidden) ]
 *   x = fc u                                  fc: [H, 2H]
 *   x = DecoderLayer_fullattention(x)         own KV cache, RoPE position p
 *   m = rmsnorm0(x; mtp.norm);  logits = lm_head m     (the target's head)
 *
 * h is the target's post-final-norm hidden (pre-norm as an option), or the
 * head's own m when drafting recursively. The drafter binds the target's
 * embed_tokens and lm_head; it owns only the tensors above. */
#ifndef NX_SPEC_MTP_H
#define NX_SPEC_MTP_H

#include "kernels/sketch.h"
#include "model/model.h"
#include "nextn.h"

struct nx_drafter {
    const nx_model *target;       /* bound: embed_tokens, lm_head, pool, dims  */
    st_set *own;                  /* a separate drafter's files (NULL: target's) */
    mdl_owned owned;
    kn_mat fc;                    /* [H, 2H]: columns [0,H) embedding, [H,2H) hidden */
    float *norm_embed;            /* [H] pre_fc_norm_embedding (effective)     */
    float *norm_hidden;           /* [H] pre_fc_norm_hidden                    */
    float *norm_out;              /* [H] mtp.norm                              */
    mdl_layer layer;              /* mtp.layers.0: gated attention + SwiGLU    */
    int block_size;               /* verify block: pending token + drafts      */
    int hidden_prenorm;           /* feed the pre-final-norm hidden instead    */
    kn_mat head;                  /* rows of lm_head drafts are scored over:
                                     all, or the first draft_vocab (a view), or
                                     a draft_head_bits copy of those (owned)   */
    void *head_copy;              /* the copy's codes | scales | biases, or NULL */
    int head_copy_bits;           /* bits of that copy; 0 without one          */
    kn_sketch screen;             /* sign sketch of head's rows (draft_screen)  */
    void *screen_buf;             /* its bits | scales, or NULL                */
    int screen_k;                 /* rows a draft scores exactly; 0: all, no screen */
    uint64_t identity;            /* artifact identity (config + tensor index) */
    char source[256];             /* where the tensors came from, for messages */
};

/* The head's per-sequence state: its KV cache over entries 0..n-1 and the
 * output of the last committed entry. */
typedef struct {
    const nx_drafter *d;
    int max_ctx;
    void *k_cache, *v_cache;      /* the target's layout (model.h's mdl_kv), mdl_kv_cap(max_ctx) */
    int n;                        /* entries held (committed + provisional)    */
    mdl_scratch sc;
    float *u;                     /* [MDL_CHUNK][2H] fc input                  */
    float *m;                     /* [H] output m of the last entry run        */
    float *m_kept;                /* [H] m as mtp_rows_keep_m saved it         */
    float *logits;                /* [V] draft logits of the last entry run    */
    void *head_work;              /* mtp_head_rows' scratch (with a screen), or NULL */
} mtp_rows;

/* NX_DRAFT_HEAD_AUTO's choice for a draft head as stored and without a
 * screen (with one, nx_drafter_load keeps the head as stored): 4 bits when it
 * is wider than that and at least MTP_AUTO_HEAD_BYTES, else 0 (as stored).
 * Why: a draft scores the whole head for one row, so it costs the head's
 * bytes from DRAM; a 4-bit copy of a bf16 or 8-bit head halves or quarters
 * that (0.8B shape, `nextn bench`: MTP decode 0.95x -> 1.17x plain at q8,
 * 0.90x -> 1.04x at bf16; bench/RESULTS.md). A head that stays in cache
 * gains nothing and only loses acceptance (the bundled model: 62% -> 51%). */
#define MTP_AUTO_HEAD_BYTES (64.0 * 1024 * 1024)
int mtp_auto_head_bits(const kn_mat *head);

/* NX_DRAFT_SCREEN_AUTO's choice: MTP_SCREEN_K rows where the head as stored
 * is at least MTP_AUTO_HEAD_BYTES and its hidden size a multiple of 64, else
 * 0 (no screen). Why this k: on the 0.8B-shape fixture, whose random head
 * gives flat logits, the draft's own argmax ranks among the sketch's best
 * 1,024 in 94% of drafts, 2,048 in 96%, 4,096 in 99% (141 measured); on the
 * bundled (trained) model among the best 16 in all but 1 of 388. Rows that
 * lose that way are mostly drafts the target rejects anyway: q8 acceptance
 * 58.8% at 2,048, 59.6% at 4,096, 60.4% at 8,192, while 2,048 ran 0.96x the
 * wall time of 4,096 (q4 and q8, 300-400 tokens). The rows are scattered:
 * each thread copies its rows side by side before multiplying them
 * (kernels/quant.h: kn_matmul_qx_gathered), 0.17-0.24 ms for the 2,048 rows
 * of the q4 fixture on 2 threads (0.43 in place). With the rows that cheap,
 * 4,096 against 2,048 on that fixture (one process, blocks of rounds in
 * turn) accepted 60.6% against 56.1% and ran 1.016x the tokens a second;
 * its flat logits overstate what a larger k wins on a trained head, where
 * the argmax ranks near the top (above), so k stays. */
#define MTP_SCREEN_K 2048
int mtp_auto_screen_k(const kn_mat *head);

/* Loading (mtp.c, mtp_load.c). */
nx_status mtp_load_from_target(nx_drafter *d, char *err, size_t errlen);
nx_status mtp_load_from_dir(nx_drafter *d, const char *dir, char *err, size_t errlen);
/* Binds fc, the three norms and layers.0 under prefix ("mtp.", "" or
 * "language_model.mtp."); plus_one: zero-centred norms are stored raw. */
nx_status mtp_bind_head(nx_drafter *d, mdl_binder *b, const char *prefix, int plus_one);
/* Takes ownership of st (a drafter directory's or mtp.safetensors' tensors). */
nx_status mtp_bind_set(nx_drafter *d, st_set *st, const char *where, char *err, size_t errlen);
uint64_t mtp_head_identity(const nx_drafter *d, const st_set *st, const char *prefix);

nx_status mtp_rows_init(mtp_rows *r, const nx_drafter *d, int max_ctx, char *err, size_t errlen);
void mtp_rows_free(mtp_rows *r);

/* Appends entries at positions r->n .. r->n+T-1 from tokens[t] and hidden
 * rows hidden[t] ([T][H]). logits_out: [T][V] for every row (teacher-forced
 * logits; r->sc.hfinal holds the last chunk's outputs m, and r->m the last
 * entry's), or NULL: entries whose outputs nobody reads (prefill). Only the
 * rows whose outputs are asked for run the whole layer; the others write
 * just their K/V, the same bits either way. No allocation. */
void mtp_rows_append(mtp_rows *r, const int32_t *tokens, const float *hidden, int T, float *logits_out);
/* Appends as above, only the last entry running the whole layer: its output
 * m is left in r->m, for a draft (mtp_head_drafts) to score. */
void mtp_rows_append_m(mtp_rows *r, const int32_t *tokens, const float *hidden, int T);
/* Saves m, the output of entry n - 1, before entries that may be dropped
 * are run; mtp_rows_drop_to(r, n) drops them and puts m back, so that the
 * next entry reads the m it would have read had they never run. */
void mtp_rows_keep_m(mtp_rows *r);
void mtp_rows_drop_to(mtp_rows *r, int n);
/* Bytes of scratch mtp_head_rows needs, for any drafter of target m. */
size_t mtp_head_work_bytes(const nx_model *m);
/* Draft logits of n <= MDL_CHUNK output rows m_rows ([n][H]) through the
 * drafter's head: logits [n][V], -inf beyond its draft vocabulary. The head
 * (with a screen: its sketch) is read once for all n rows. With a screen,
 * each row's logits are the head's for the screen_k rows its sketch ranks
 * best and -inf elsewhere; a row holding a value that is not finite is
 * scored over the whole head. No row's logits depend on the others'. work:
 * mtp_head_work_bytes(d->target) bytes, 64-byte aligned (unused without a
 * screen: NULL will do). */
void mtp_head_rows(const nx_drafter *d, mdl_scratch *sc, void *work, const float *m_rows, int n, float *logits);
/* How mtp_head_drafts chooses each row's draft.
 *
 * pick: row t's draft from its logits, which hold the head's scores at
 * cand[0..n) (ascending ids; the rest of the row is scratch) when a screen
 * ranked the row, else (cand NULL) the whole row of n = V values, -inf
 * beyond the draft vocabulary. Returns the draft, or -1 for the row's argmax.
 * NULL: every row's argmax.
 *
 * lift: ids[0..returned) (ascending, distinct, below V) that row t scores
 * besides a screen's candidates and a draft vocabulary: the ids a positive
 * logit bias can lift to the top, which neither the sketch nor the draft
 * vocabulary knows of. They are scored with the head a screen or a draft
 * vocabulary would score them with, or, past the draft vocabulary, with the
 * target's lm_head. NULL: none. */
typedef int32_t (*mtp_pick_fn)(void *ctx, int t, float *logits, const int32_t *cand, int n);
typedef int (*mtp_lift_fn)(void *ctx, int t, const int32_t **ids);

typedef struct {
    mtp_pick_fn pick;
    mtp_lift_fn lift;
    void *ctx;
} mtp_chooser;

/* mtp_head_rows' drafts: drafts[t] = ch's pick for row t, or (ch NULL, or its
 * pick NULL or -1) the argmax of row t's draft logits (mtp_argmax), the same
 * ids, without writing rows of -inf where a screen scores only its
 * candidates. logits: [n][V] scratch (left unspecified). */
void mtp_head_drafts(const nx_drafter *d, mdl_scratch *sc, void *work, const float *m_rows, int n, float *logits,
                     int32_t *drafts, const mtp_chooser *ch);
/* One entry for each of n sequences (n <= MDL_CHUNK, one drafter): entry i
 * from tokens[i] and hidden[i] ([H]) appended to rs[i], all run as one chunk
 * in sc (u: [n][2H] scratch) so the head's layer is read once. Outputs m go
 * to m_out ([n][H]) and each rs[i]->m. Bit for bit what mtp_rows_append_m of
 * that one entry on rs[i] gives. */
void mtp_step_batch(mtp_rows *const *rs, int n, const int32_t *tokens, const float *const *hidden, mdl_scratch *sc,
                    float *u, float *m_out);

/* Index of the largest value (ties to the lowest id, NaNs skipped:
 * kn_argmax_f32): a greedy draft. */
int32_t mtp_argmax(const float *logits, int n);

#endif
