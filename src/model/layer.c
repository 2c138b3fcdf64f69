/* layer.c — the decoder layers of Qwen3.5 (spec §3.4-§3.7), shared by the
 * target stack (forward.c) and the MTP head (spec/mtp.c).
 *
 *   u  = x + Mixer(rmsnorm0(x; input_layernorm))     gated attention or Gated DeltaNet
 *   x' = u + SwiGLU(rmsnorm0(u; post_attention_layernorm))
 *
 * Every row is computed with the same kernels in the same order whatever T
 * is: matmul rows are independent dot products, attention runs per query row
 * over the cache, the GDN recurrence steps token by token. That is what makes
 * a verify block of T tokens bit-identical to T single steps (spec §6.6).
 * No SIMD and no allocation here: kernels do the math, the pool splits ranges. */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/attention.h"
#include "kernels/gdn.h"
#include "kernels/norm.h"
#include "kernels/fpq.h"
#include "kernels/quant.h"
#include "kernels/rope.h"
#include "model/model.h"

/* HF l2norm epsilon inside the square root (spec §3.2), independent of rms_norm_eps. */
#define GDN_L2_EPS 1e-6f

/* ---- threaded ops ------------------------------------------------------ */

#define MDL_MAX_LINEARS 4

/* Products of matrices that read the same input, their rows numbered one
 * after another: row r of matrix i is job row start[i] + r. */
typedef struct {
    int n;
    const kn_mat *const *ws;
    float *const *ys;
    int64_t start[MDL_MAX_LINEARS + 1];
    const float *x;       /* f32 activations, read when qx is NULL */
    const kn_qx *qx;
    int T;
} linear_job;

/* Rows [r0, r1) of w times T activation rows: the int8 rows in qx, or f32
 * x when qx is NULL. */
static void product_rows(const kn_mat *w, const float *x, const kn_qx *qx, int T, float *y, int64_t r0, int64_t r1) {
    if (qx) kn_matmul_qx_rows(w, qx, y, w->rows, r0, r1);
    else kn_matmul_rows(w, x, w->cols, T, y, w->rows, r0, r1);
}

/* 1 if products of w take int8 activations: affine weights, mxfp4 and
 * nvfp4 (kernels/fpq.h: kn_fp_int8); the other formats multiply f32 ones. */
static int takes_int8(const kn_mat *w) { return w->bits || kn_fp_int8(w); }

/* How a product of w takes x (T rows): &qx with x rounded to int8 over
 * sc->qx, or NULL for x as it is (dense w, or f32_activations). Rounded once,
 * on the calling thread, for all the rows the workers then split: T * cols
 * work, against T * cols * rows for the products. */
static const kn_qx *product_input(const nx_model *m, mdl_scratch *sc, const kn_mat *w, const float *x, int T, kn_qx *qx) {
    if (!takes_int8(w) || m->f32_activations) return NULL;
    kn_qx_bind(qx, sc->qx, T, w);
    kn_quantize_x(qx, x, w->cols);
    return qx;
}

static void linear_rows(void *ctx, int64_t r0, int64_t r1, int tid) {
    const linear_job *j = ctx;
    for (int i = 0; i < j->n; i++) {
        const int64_t a = r0 > j->start[i] ? r0 : j->start[i], b = r1 < j->start[i + 1] ? r1 : j->start[i + 1];
        if (a >= b) continue;
        product_rows(j->ws[i], j->x, j->qx, j->T, j->ys[i], a - j->start[i], b - j->start[i]);
    }
}

/* 1 if a and b take their activations the same way (kernels/quant.h). */
static int same_activations(const nx_model *m, const kn_mat *a, const kn_mat *b) {
    if (m->f32_activations || !takes_int8(a) || !takes_int8(b)) return m->f32_activations || (!takes_int8(a) && !takes_int8(b));
    return kn_qx_group(a) == kn_qx_group(b) && kn_qx_lanes(a) == kn_qx_lanes(b);
}

void mdl_linears(const nx_model *m, mdl_scratch *sc, const float *x, int T, int n, const kn_mat *const ws[],
                 float *const ys[]) {
    assert(T <= MDL_CHUNK && 1 <= n && n <= MDL_MAX_LINEARS);
    for (int i = 1; i < n; i++)
        if (!same_activations(m, ws[0], ws[i])) {   /* mixed precision: one product at a time */
            for (int k = 0; k < n; k++) mdl_linears(m, sc, x, T, 1, &ws[k], &ys[k]);
            return;
        }
    kn_qx qx;
    linear_job j = {n, ws, ys, {0}, x, product_input(m, sc, ws[0], x, T, &qx), T};   /* one rounding for all n */
    for (int i = 0; i < n; i++) j.start[i + 1] = j.start[i] + ws[i]->rows;
    /* grain 16: claims start on multiples of 16 job rows (a 64-byte line of
     * a one-row y where a matrix starts on such a multiple), and stay small
     * enough to balance a 1024-row matrix over 16 threads (a grain of 48
     * measured the same on 2 threads but would leave 16 threads 1.5x
     * uneven there) */
    nx_pool_run(m->pool, linear_rows, &j, j.start[n], 16);
}

void mdl_linear(const nx_model *m, mdl_scratch *sc, const kn_mat *w, const float *x, int T, float *y) {
    mdl_linears(m, sc, x, T, 1, &w, &y);
}

/* Rows idx[j0 .. j1) of one activation row: gathered where the int8
 * product gathers (kernels/quant.h: kn_matmul_qx_gathered), else runs of
 * consecutive rows go to the kernel as one range. */
typedef struct {
    const kn_mat *w;
    const float *x;       /* f32 activations, read when qx is NULL */
    const kn_qx *qx;
    const int32_t *idx;
    float *y;
} linear_at_job;

/* Rows ahead of the one computed whose bytes are asked for, where rows are
 * not gathered: the rows are scattered, so each is a DRAM latency the
 * prefetcher cannot hide. */
#define LINEAR_AT_AHEAD 8
/* Bytes of rows copied together for an int8 product (kernels/quant.h:
 * kn_matmul_qx_gathered), on the worker's stack: in L1 while the product
 * reads them. */
#define LINEAR_AT_GATHER_BYTES 32768

static void linear_at_rows(void *ctx, int64_t j0, int64_t j1, int tid) {
    const linear_at_job *j = ctx;
    const int64_t per = j->qx ? kn_gather_rows(j->w, LINEAR_AT_GATHER_BYTES) : 0;
    if (per > 0) {
        _Alignas(64) unsigned char buf[LINEAR_AT_GATHER_BYTES];
        float y[LINEAR_AT_GATHER_BYTES / 64];   /* a packed row takes a line at least */
        for (int64_t a = j0; a < j1; a += per) {
            const int64_t n = j1 - a < per ? j1 - a : per;
            kn_matmul_qx_gathered(j->w, j->qx, j->idx + a, n, buf, y);
            for (int64_t i = 0; i < n; i++) j->y[j->idx[a + i]] = y[i];
        }
        return;
    }
    for (int64_t a = j0; a < j1 && a < j0 + LINEAR_AT_AHEAD; a++) kn_mat_prefetch_row(j->w, j->idx[a]);
    while (j0 < j1) {
        int64_t e = j0 + 1;
        while (e < j1 && j->idx[e] == j->idx[e - 1] + 1) e++;
        for (int64_t a = j0 + LINEAR_AT_AHEAD; a < j1 && a < e + LINEAR_AT_AHEAD; a++) kn_mat_prefetch_row(j->w, j->idx[a]);
        const int64_t r0 = j->idx[j0], r1 = j->idx[e - 1] + 1;
        product_rows(j->w, j->x, j->qx, 1, j->y, r0, r1);
        j0 = e;
    }
}

void mdl_linear_at(const nx_model *m, mdl_scratch *sc, const kn_mat *w, const float *x, const int32_t *idx, int64_t k,
                   float *y) {
    kn_qx qx;
    linear_at_job j = {w, x, product_input(m, sc, w, x, 1, &qx), idx, y};
    nx_pool_run(m->pool, linear_at_rows, &j, k, 64);
}

void mdl_rope_rows(const nx_model *m, mdl_scratch *sc, int row0, int pos, int T) {
    for (int t = 0; t < T; t++)
        kn_rope_table(sc->rope + (int64_t)(row0 + t) * m->cfg.rotary_dim, pos + t, m->cfg.rotary_dim, m->cfg.rope_theta);
}

static void norm_rows(const nx_model *m, float *y, const float *x, const float *w, int T) {
    int64_t H = m->cfg.hidden_size;
    for (int t = 0; t < T; t++) kn_rmsnorm(y + t * H, x + t * H, w, H, (float)m->cfg.rms_norm_eps);
}

static void add_rows(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

/* ---- SwiGLU MLP (spec §3.7): sc->out = W_down(silu(W_gate xn) * W_up xn) -- */

/* ff1 = silu(ff1) * ff2 over elements [i0, i1) */
static void swiglu_range(void *ctx, int64_t i0, int64_t i1, int tid) {
    const mdl_scratch *sc = ctx;
    kn_silu_mul_f32(sc->ff1 + i0, sc->ff1 + i0, sc->ff2 + i0, i1 - i0);
}

static void mlp_block(const nx_model *m, const mdl_layer *L, mdl_scratch *sc, int T) {
    int64_t n = (int64_t)T * m->cfg.intermediate_size;
    const kn_mat *ws[] = {&L->gate_proj, &L->up_proj};
    float *ys[] = {sc->ff1, sc->ff2};
    mdl_linears(m, sc, sc->xn, T, 2, ws, ys);
    nx_pool_run(m->pool, swiglu_range, sc, n, 1024);
    mdl_linear(m, sc, &L->down_proj, sc->ff1, T, sc->out);
}

/* The second half of every layer: x += SwiGLU(rmsnorm0(x)). */
static void ffn_half(const nx_model *m, const mdl_layer *L, mdl_scratch *sc, int T) {
    norm_rows(m, sc->xn, sc->x, L->post_norm, T);
    mlp_block(m, L, sc, T);
    add_rows(sc->x, sc->out, (int64_t)T * m->cfg.hidden_size);
}

/* ---- gated full attention (spec §3.5) ---------------------------------- */

typedef struct {
    const nx_model *m;
    mdl_scratch *sc;
    const mdl_seg *segs;
    int nseg;
    int block;                    /* rows per block (attention_block_rows)  */
} attn_job;

/* The segment row t belongs to. Segments are few (one per sequence). */
static const mdl_seg *seg_of(const mdl_seg *segs, int nseg, int t) {
    int i = 0;
    while (i + 1 < nseg && t >= segs[i + 1].row0) i++;
    return &segs[i];
}

/* Rows per attention block: up to MDL_ATTN_TOKENS, fewer when that would
 * leave threads without a (block, KV head) job (a verify of 4 tokens with 2
 * KV heads on 8 threads goes token by token: a row's bits do not depend on
 * its block). */
static int attention_block_rows(const nx_model *m, int rows) {
    const int per = rows * m->cfg.n_kv_heads / nx_pool_size(m->pool);
    return per < 1 ? 1 : per > MDL_ATTN_TOKENS ? MDL_ATTN_TOKENS : per;
}

/* Blocks of up to j->block consecutive rows in segment i. */
static int64_t seg_blocks(const attn_job *j, int i) { return (j->segs[i].T + j->block - 1) / j->block; }

/* All segments' blocks: the attention jobs, each block by each KV head. */
static int64_t attention_blocks(const attn_job *j) {
    int64_t n = 0;
    for (int i = 0; i < j->nseg; i++) n += seg_blocks(j, i);
    return n;
}

/* Block b's segment, and its first row's offset in the segment. */
static const mdl_seg *block_of(const attn_job *j, int64_t b, int *first) {
    int i = 0;
    for (;; i++) {
        const int64_t nb = seg_blocks(j, i);
        if (b < nb || i == j->nseg - 1) break;
        b -= nb;
    }
    *first = (int)b * j->block;
    return &j->segs[i];
}

/* KV head h's row for position p in cache c (kv.k or kv.v) of kv; for p 0
 * in kv.k, the head's first K tile. */
static void *kv_row(mdl_kv kv, void *c, int h, int p, int hd) {
    return (char *)c + (((size_t)h * (size_t)kv.cap + (size_t)p) * (size_t)hd) * nx_dtype_size(kv.dtype);
}

/* One (block, KV head) pair per index: softmax attention of the query heads
 * that share the KV head, each row over positions 0..pos+t of its own
 * sequence, then the sigmoid output gate. */
static void attention_rows(void *ctx, int64_t i0, int64_t i1, int tid) {
    const attn_job *j = ctx;
    const cfg_model *c = &j->m->cfg;
    mdl_scratch *sc = j->sc;
    int hd = c->head_dim, Nh = c->n_heads, Nkv = c->n_kv_heads, group = Nh / Nkv, gated = c->attn_output_gate;
    int64_t qstride = (int64_t)Nh * hd * (gated ? 2 : 1), ldq = (int64_t)hd * (gated ? 2 : 1);
    float *scores = sc->scores + (int64_t)tid * MDL_ATTN_TOKENS * group * sc->max_ctx;
    for (int64_t i = i0; i < i1; i++) {
        int first, kvh = (int)(i % Nkv), h0 = kvh * group;
        const mdl_seg *g = block_of(j, i / Nkv, &first);
        int t0 = g->row0 + first, T = g->T - first < j->block ? g->T - first : j->block;
        const float *q = sc->proj + t0 * qstride + (int64_t)h0 * ldq;
        float *o = sc->mix + (int64_t)t0 * Nh * hd + (int64_t)h0 * hd;
        const kn_attn_block b = {.out = o, .ldo = hd, .ldo_t = (int64_t)Nh * hd, .q = q, .ldq = ldq, .ldq_t = qstride,
                                 .G = group, .T = T, .k = kv_row(g->kv, g->kv.k, kvh, 0, hd),
                                 .v = kv_row(g->kv, g->kv.v, kvh, 0, hd), .kv_dtype = g->kv.dtype, .kv_stride = hd,
                                 .n0 = g->pos + first, .hd = hd, .scale = 1.0f / sqrtf((float)hd)};
        kn_attention(&b, scores);
        if (gated)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < group; h++) {
                    const float *gate = q + t * qstride + (int64_t)h * ldq + hd;
                    float *oh = o + (int64_t)t * Nh * hd + (int64_t)h * hd;
                    kn_sigmoid_gate_f32(oh, gate, hd);
                }
    }
}

/* K and V of the T normed rows sc->xn: k_proj / v_proj, per-head k_norm and
 * RoPE, written into each segment's caches at its positions; with_q: also
 * the queries (and gates) into sc->proj, in the same pass over sc->xn. */
static void attention_kv_rows(const nx_model *m, const mdl_layer *L, mdl_scratch *sc, const mdl_seg *segs, int nseg,
                              int T, int with_q) {
    const cfg_model *c = &m->cfg;
    int hd = c->head_dim, rd = c->rotary_dim, Nkv = c->n_kv_heads;
    int64_t kvd = (int64_t)Nkv * hd;
    /* [T][Nkv*hd] each, and [T][Nh * (query | gate)] */
    const kn_mat *ws[] = {&L->k_proj, &L->v_proj, &L->q_proj};
    float *ys[] = {sc->kbuf, sc->vbuf, sc->proj};
    mdl_linears(m, sc, sc->xn, T, with_q ? 3 : 2, ws, ys);
    for (int t = 0; t < T; t++) {
        const mdl_seg *g = seg_of(segs, nseg, t);
        const float *cs = sc->rope + (int64_t)t * rd;
        int p = g->pos + (t - g->row0);
        assert(p < g->kv.cap);   /* past it, head h's rows would run into head h + 1's */
        for (int h = 0; h < Nkv; h++) {                /* k: per-head norm, RoPE, append; v: append */
            float *k = sc->kbuf + t * kvd + h * hd;
            kn_rmsnorm(k, k, L->k_norm, hd, (float)c->rms_norm_eps);
            kn_rope_apply(k, cs, rd);
            kn_attn_store_k(kv_row(g->kv, g->kv.k, h, 0, hd), g->kv.dtype, p, k, hd);
            kn_attn_store_row(kv_row(g->kv, g->kv.v, h, p, hd), g->kv.dtype, sc->vbuf + t * kvd + h * hd, hd);
        }
    }
}

/* All rows of a chunk in one segment: the MTP head's single sequence. */
static mdl_seg one_seg(mdl_kv kv, int pos, int T) {
    mdl_seg g = {0};
    g.T = T, g.pos = pos, g.kv = kv;
    return g;
}

void mdl_attention_kv(const nx_model *m, const mdl_layer *L, mdl_scratch *sc, mdl_kv kv, int pos, int T) {
    mdl_seg g = one_seg(kv, pos, T);
    norm_rows(m, sc->xn, sc->x, L->input_norm, T);
    attention_kv_rows(m, L, sc, &g, 1, T, 0);
}

void mdl_attention_segs(const nx_model *m, const mdl_layer *L, mdl_scratch *sc, const mdl_seg *segs, int nseg) {
    const cfg_model *c = &m->cfg;
    int hd = c->head_dim, rd = c->rotary_dim, Nh = c->n_heads, gated = c->attn_output_gate;
    int64_t qstride = (int64_t)Nh * hd * (gated ? 2 : 1);
    float eps = (float)c->rms_norm_eps;
    int T = segs[nseg - 1].row0 + segs[nseg - 1].T;

    norm_rows(m, sc->xn, sc->x, L->input_norm, T);
    attention_kv_rows(m, L, sc, segs, nseg, T, 1);
    for (int t = 0; t < T; t++) {
        const float *cs = sc->rope + (int64_t)t * rd;
        for (int h = 0; h < Nh; h++) {                 /* q: per-head norm, then RoPE */
            float *q = sc->proj + t * qstride + (int64_t)h * hd * (gated ? 2 : 1);
            kn_rmsnorm(q, q, L->q_norm, hd, eps);
            kn_rope_apply(q, cs, rd);
        }
    }
    attn_job j = {m, sc, segs, nseg, attention_block_rows(m, T)};
    nx_pool_run(m->pool, attention_rows, &j, attention_blocks(&j) * c->n_kv_heads, 1);
    mdl_linear(m, sc, &L->o_proj, sc->mix, T, sc->out);
    add_rows(sc->x, sc->out, (int64_t)T * c->hidden_size);
    ffn_half(m, L, sc, T);
}

void mdl_attention_layer(const nx_model *m, const mdl_layer *L, mdl_scratch *sc, mdl_kv kv, int pos, int T) {
    mdl_seg g = one_seg(kv, pos, T);
    mdl_attention_segs(m, L, sc, &g, 1);
}

/* ---- Gated DeltaNet (spec §3.6) ---------------------------------------- */

typedef struct {
    const nx_model *m;
    const mdl_layer *L;
    mdl_scratch *sc;
    const mdl_seg *segs;
    int nseg;
    const mdl_seg *conv_seg;      /* conv_channels: the segment being convolved */
} gdn_job;

/* Channels [c0, c1) of one segment, all on the thread that claimed them:
 * the conv window = [the conv state (Kc-1 rows) | the segment's pre-conv
 * rows], read where its rows lie, or with a conv log first gathered there
 * (the state's rows, unless the log starts at them, then the segment's),
 * the conv + SiLU, and without a log the new conv state = the window's
 * last Kc-1 rows in place; then q <- l2n(q)/sqrt(Dk), k <- l2n(k) for the
 * key heads inside [c0, c1) (claims start on multiples of a grain that is a
 * multiple of Dk, so a head is never split). */
static void conv_channels(void *ctx, int64_t c0, int64_t c1, int tid) {
    const gdn_job *j = ctx;
    const cfg_model *c = &j->m->cfg;
    const mdl_seg *g = j->conv_seg;
    mdl_scratch *sc = j->sc;
    const int64_t CD = cfg_conv_dim(c), KD = cfg_key_dim(c), Dk = c->linear_k_dim, keep = c->conv_kernel - 1;
    const size_t bytes = (size_t)(c1 - c0) * sizeof(float);
    assert(c0 % Dk == 0 && (c1 % Dk == 0 || c1 == CD));   /* whole key heads (mdl_gdn_segs' grain) */
    const float *window[CFG_MAX_CONV_KERNEL - 1 + MDL_CHUNK];
    for (int64_t r = 0; r < keep; r++) window[r] = g->conv_state + r * CD;
    for (int64_t t = 0; t < g->T; t++) window[keep + t] = sc->proj + (g->row0 + t) * CD;
    if (g->conv_log) {
        /* into the log: the state's rows where it starts below them (row r
         * from r + a whole number of rows up: each read before a lower row
         * of the log overwrites it), then the segment's */
        for (int64_t r = g->conv_log == g->conv_state ? keep : 0; r < keep + g->T; r++) {
            memcpy(g->conv_log + r * CD + c0, window[r] + c0, bytes);
            window[r] = g->conv_log + r * CD;
        }
    }
    float *out = sc->conv_out + (int64_t)g->row0 * CD;
    kn_conv_silu(out, window, CD, g->T, j->L->conv_w, c->conv_kernel, c0, c1);
    /* state row r <- window row T + r: a later state row while T + r < Kc-1
     * (r ascending reads each before it is overwritten), then a new row */
    if (!g->conv_log)
        for (int64_t r = 0; r < keep; r++) memcpy(g->conv_state + r * CD + c0, window[g->T + r] + c0, bytes);
    for (int64_t h0 = c0; h0 + Dk <= c1 && h0 < 2 * KD; h0 += Dk) {
        const float scale = h0 < KD ? 1.0f / sqrtf((float)Dk) : 1.0f;
        for (int64_t t = 0; t < g->T; t++) kn_l2norm_scaled(out + t * CD + h0, Dk, GDN_L2_EPS, scale);
    }
    /* a verify records k (channels [KD, 2 KD)) as the recurrence reads it */
    const int64_t k0 = c0 > KD ? c0 : KD, k1 = c1 < 2 * KD ? c1 : 2 * KD, RW = mdl_replay_row(c);
    if (g->replay && k0 < k1)
        for (int64_t t = 0; t < g->T; t++)
            memcpy(g->replay + t * RW + (k0 - KD), out + t * CD + k0, (size_t)(k1 - k0) * sizeof(float));
}

/* Value head jh's state S (key head kh) advanced by the state updates of
 * the first n tokens of a record (rows: mdl_replay_row floats each, as a
 * verify wrote them): kn_gated_delta_replay with their k, delta and alpha.
 * next: the head to fetch ahead while this one runs, or NULL. */
static void replay_head(const cfg_model *c, float *S, const float *next, const float *rows, int n, int64_t kh,
                        int64_t jh) {
    const int Dk = c->linear_k_dim, Dv = c->linear_v_dim;
    const int64_t KD = cfg_key_dim(c), VD = cfg_value_dim(c), RW = mdl_replay_row(c);
    float alpha[MDL_CHUNK];
    assert(n <= MDL_CHUNK);
    for (int i = 0; i < n; i++) alpha[i] = rows[i * RW + KD + VD + jh];
    kn_gated_delta_replay(S, next, n, rows + kh * Dk, rows + KD + jh * Dv, RW, alpha, Dk, Dv);
}

/* One index per (segment, value head): that head's recurrence over the
 * segment's tokens in order (kn_gated_delta_steps: the state read once and
 * written once), then the gated RMSNorm of each output. Heads and
 * sequences are independent. A verify keeps the state from before its block
 * (recurrent) and writes the state after it to recurrent_out, past the
 * caches: its lines are not read for ownership first, so the verify moves a
 * plain step's state bytes (read once, written once). Against writing it
 * through the caches (18 MB a verify at the 0.8B shape): MTP sessions at K =
 * 3 on the q4 fixture, both ways in turn in one process, verify 0.975-0.979x
 * the time, tokens a second 1.016-1.022x (q8: level); measured with the
 * later tokens on a per-thread scratch head, which kn_gated_delta_steps'
 * blocks then matched (bench/RESULTS.md, twenty-third session). It also
 * records each token's alpha and delta beside the k conv_channels recorded,
 * for a rollback's replay (replay_heads). */
static void delta_heads(void *ctx, int64_t j0, int64_t j1, int tid) {
    (void)tid;
    const gdn_job *g = ctx;
    const cfg_model *c = &g->m->cfg;
    const mdl_layer *L = g->L;
    mdl_scratch *sc = g->sc;
    int Hv = c->linear_v_heads, Dk = c->linear_k_dim, Dv = c->linear_v_dim, r = c->linear_v_heads / c->linear_k_heads;
    int64_t CD = cfg_conv_dim(c), KD = cfg_key_dim(c), VD = cfg_value_dim(c), head = (int64_t)Dv * Dk;
    int64_t RW = mdl_replay_row(c);
    float eps = (float)c->rms_norm_eps;
    int streamed = 0;
    for (int64_t ij = j0; ij < j1; ij++) {
        const mdl_seg *sg = &g->segs[ij / Hv];
        int64_t jh = ij % Hv;
        int64_t kh = jh / r; /* value head j reads key head j // r (HF grouped order) */
        assert(sg->T <= MDL_CHUNK);
        float alpha[MDL_CHUNK], beta[MDL_CHUNK];
        for (int i = 0; i < sg->T; i++) {
            int t = sg->row0 + i;
            beta[i] = kn_sigmoid(sc->bbuf[t * Hv + jh]);
            alpha[i] = expf(L->neg_exp_a[jh] * kn_softplus(sc->abuf[t * Hv + jh] + L->dt_bias[jh]));
            if (sg->replay) sg->replay[i * RW + KD + VD + jh] = alpha[i];
        }
        const float *row0 = sc->conv_out + sg->row0 * CD;   /* token i's q | k | v: CD floats apart */
        float *o0 = sc->mix + sg->row0 * VD + jh * Dv;
        /* a verify records each token's delta for a replay (mdl_replay_row) */
        const kn_delta_tokens tk = {sg->T, row0 + kh * Dk, row0 + KD + kh * Dk, row0 + 2 * KD + jh * Dv, CD, alpha, beta,
                                    o0, VD, sg->replay ? sg->replay + KD + jh * Dv : NULL, RW};
        const int record = sg->recurrent_out != NULL;
        float *S = sg->recurrent + jh * head;
        if (sg->n_kept) replay_head(c, S, NULL, sg->kept, sg->n_kept, kh, jh);   /* a rollback's (mdl_rollback) */
        const float *next = NULL;   /* the head this thread steps next */
        if (ij + 1 < j1) next = g->segs[(ij + 1) / Hv].recurrent + (ij + 1) % Hv * head;
        kn_gated_delta_steps(record ? sg->recurrent_out + jh * head : S, S, next, &tk, Dk, Dv, record);
        streamed |= record || sg->replay;   /* the state and the deltas */
        for (int i = 0; i < sg->T; i++)
            kn_rmsnorm_gated(o0 + i * VD, o0 + i * VD, sc->zbuf + (sg->row0 + i) * VD + jh * Dv, L->gnorm, Dv, eps);
    }
    if (streamed) kn_store_fence();
}

int64_t mdl_replay_row(const cfg_model *c) { return cfg_key_dim(c) + cfg_value_dim(c) + c->linear_v_heads; }

typedef struct {
    const nx_model *m;
    nx_state *s;
    int keep;
} replay_job;

/* One index per (layer, value head): the kept tokens' updates of that
 * head's state, in order, from the record (kn_gated_delta_replay: the
 * verify's deltas, so no dot products and no outputs). Against running the
 * kept steps again from the recorded k, v, alpha and beta (k as q, the
 * outputs discarded): see bench/RESULTS.md, forty-third session. */
static void replay_heads(void *ctx, int64_t j0, int64_t j1, int tid) {
    (void)tid;
    const replay_job *j = ctx;
    const cfg_model *c = &j->m->cfg;
    const mdl_rollback *rb = &j->s->rb;
    const int Hv = c->linear_v_heads, r = c->linear_v_heads / c->linear_k_heads;
    const int64_t head = (int64_t)c->linear_v_dim * c->linear_k_dim;
    assert(j->keep <= MDL_CHUNK);
    for (int64_t ij = j0; ij < j1; ij++) {
        const int l = (int)(ij / Hv), jh = (int)(ij % Hv);
        if (c->layer_full[l]) continue;
        int64_t n = ij + 1;   /* the head this thread replays next: past the attention layers */
        while (n < j1 && c->layer_full[n / Hv]) n += Hv - n % Hv;
        replay_head(c, j->s->recurrent[l] + jh * head, n < j1 ? j->s->recurrent[n / Hv] + n % Hv * head : NULL,
                    rb->kept[l], j->keep, jh / r, jh);
    }
}

void mdl_gdn_replay(const nx_model *m, nx_state *s, int keep) {
    replay_job j = {m, s, keep};
    nx_pool_run(m->pool, replay_heads, &j, (int64_t)m->cfg.n_layers * m->cfg.linear_v_heads, 1);
}

void mdl_gdn_segs(const nx_model *m, const mdl_layer *L, mdl_scratch *sc, const mdl_seg *segs, int nseg) {
    const cfg_model *c = &m->cfg;
    int64_t CD = cfg_conv_dim(c);
    int T = segs[nseg - 1].row0 + segs[nseg - 1].T;

    norm_rows(m, sc->xn, sc->x, L->input_norm, T);
    /* [T][CD] pre-conv q|k|v, [T][VD] output gate, [T][Hv] beta and decay logits */
    const kn_mat *ws[] = {&L->in_qkv, &L->in_z, &L->in_b, &L->in_a};
    float *ys[] = {sc->proj, sc->zbuf, sc->bbuf, sc->abuf};
    mdl_linears(m, sc, sc->xn, T, 4, ws, ys);

    /* Per sequence, channels split over the threads: conv window, conv,
     * new conv state, q and k normalised (conv_channels). Whole key heads a
     * claim: a grain of at least 256 channels, a multiple of Dk. */
    gdn_job j = {m, L, sc, segs, nseg, NULL};
    const int64_t Dk = c->linear_k_dim, grain = Dk * (Dk < 256 ? (256 + Dk - 1) / Dk : 1);
    for (int i = 0; i < nseg; i++) {
        j.conv_seg = &segs[i];
        nx_pool_run(m->pool, conv_channels, &j, CD, grain);
    }
    nx_pool_run(m->pool, delta_heads, &j, (int64_t)nseg * c->linear_v_heads, 1);
    mdl_linear(m, sc, &L->out_proj, sc->mix, T, sc->out);
    add_rows(sc->x, sc->out, (int64_t)T * c->hidden_size);
    ffn_half(m, L, sc, T);
}
