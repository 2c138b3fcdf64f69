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
#include "kernels/matmul.h"
#include "nextn.h"

/* Tokens per internal forward chunk. Weight rows are streamed once per chunk,
 * so bigger chunks amortise memory traffic; 32 rows of activations of the
 * widest projection (I = 3584 floats for 0.8B, 448 KiB) still fit in L2. */
#define MDL_CHUNK 32

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
    float *conv_w;                /* [CD][Kc]                                  */
    float *dt_bias;               /* [Hv]                                      */
    float *neg_exp_a;             /* [Hv]  -exp(A_log)                         */
    float *gnorm;                 /* [Dv]  gated norm weight (never +1)        */
    /* SwiGLU MLP */
    kn_mat gate_proj, up_proj;    /* [I, H]                                    */
    kn_mat down_proj;             /* [H, I]                                    */
} mdl_layer;

struct nx_model {
    cfg_model cfg;
    char *dir;
    st_set *st;
    nx_pool *pool;
    int layout_mlx;               /* 1: norms already store 1+w (mlx-community) */
    const char *prefix;           /* tensor name prefix of the language model  */
    kn_mat embed;                 /* [V, H]                                    */
    kn_mat lm_head;               /* [V, H] (the embedding when tied)          */
    float *final_norm;            /* [H]                                       */
    mdl_layer *layers;            /* [L]                                       */
    void **copies;                /* owned blocks: the f32 vectors above and    */
    int n_copies;                 /* aligned copies of misaligned tensors      */
    nx_model_info info;
    char layer_pattern[CFG_MAX_LAYERS + 1];
    char weight_dtype[16];
    int n_mtp_tensors;
};

struct nx_state {
    const nx_model *m;
    int pos;                      /* tokens held                               */
    int max_ctx;
    /* per full-attention layer l (indexed by layer; NULL for GDN layers) */
    float **k_cache;              /* [max_ctx][Nkv*hd], post-norm post-RoPE K  */
    float **v_cache;              /* [max_ctx][Nkv*hd]                         */
    /* per GDN layer (NULL for attention layers) */
    float **conv_state;           /* [Kc-1][CD] last pre-conv rows             */
    float **recurrent;            /* [Hv][Dv][Dk]                              */
    /* chunk scratch, MDL_CHUNK rows each */
    float *x;                     /* [C][H] residual stream                    */
    float *xn;                    /* [C][H] normed input of a block            */
    float *proj;                  /* [C][max(2*Nh*hd, CD)] q/gate or qkv        */
    float *kbuf, *vbuf;           /* [C][Nkv*hd]                               */
    float *zbuf;                  /* [C][VD]                                   */
    float *bbuf, *abuf;           /* [C][Hv]                                   */
    float *window;                /* [Kc-1 + C][CD] conv input window          */
    float *conv_out;              /* [C][CD]                                   */
    float *mix;                   /* [C][max(Nh*hd, VD)] attention / GDN output */
    float *ff1, *ff2;             /* [C][I]                                    */
    float *out;                   /* [C][H] block output before the residual   */
    float *hfinal;                /* [C][H] post-final-norm                    */
    float *rope;                  /* [C][rd] cos/sin table per chunk row        */
    float *scores;                /* [n_threads][max_ctx] attention scratch     */
};

#endif
