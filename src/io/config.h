/* config.h — the Qwen3.5 text-model configuration (config.json).
 *
 * Accepts both layouts real checkpoints use: the vision-language wrapper with
 * the language-model fields nested under "text_config", and the flat form
 * with those fields at the top level. Field meanings and defaults follow the
 * Hugging Face Qwen3_5TextConfig (spec §1.2):
 *   - layer_types, or else full attention iff (i+1) % full_attention_interval == 0;
 *   - rope settings from rope_parameters, else the legacy rope_scaling, else the
 *     top-level rope_theta / partial_rotary_factor (defaults 1e7 and 0.25);
 *   - tie_word_embeddings from text_config, else the top level (default false);
 *   - num_key_value_heads 4 and head_dim 256 when left out, as HF's;
 *   - eos_token_id as an integer or a list, merged with generation_config.json.
 * MoE fields are parsed and rejected (NX_EUNSUPPORTED) until MoE lands; an
 * unknown model_type is NX_EUNSUPPORTED naming it. Every error names the file
 * and the field. The struct owns nothing: it can be copied freely. */
#ifndef NX_IO_CONFIG_H
#define NX_IO_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include "nextn.h"

#define CFG_MAX_LAYERS 512
#define CFG_MAX_EOS 32
#define CFG_MAX_CONV_KERNEL 64    /* linear_conv_kernel_dim: Qwen3.5 uses 4 */
#define CFG_MAX_QOVERRIDES 1024   /* mixed-precision recipes write one per module: ~500 for 64 layers */

/* MLX quantization modes (spec §2.6.1): "affine" (uint codes, a scale and a
 * bias a group) and the small-float ones, each with one (group_size, bits):
 * mxfp4 (32, 4), nvfp4 (16, 4), mxfp8 (32, 8). */
enum { CFG_Q_AFFINE = 0, CFG_Q_MXFP4, CFG_Q_NVFP4, CFG_Q_MXFP8 };
const char *cfg_qmode_name(int mode);

/* A per-module entry of the MLX quantization block: "<module path>":
 * {"mode": m, "bits": b, "group_size": g} (a missing mode is affine, and
 * missing sizes take the mode's defaults, as mlx's to_quantized(**entry)
 * does), or "<module path>": false. */
typedef struct {
    char path[120];               /* module path without ".weight"            */
    int mode;                     /* CFG_Q_*                                  */
    int bits, group;              /* 0, 0: explicitly not quantized            */
    int sizes_given;              /* 1: the entry names bits and group_size    */
} cfg_quant_override;

typedef struct {
    char model_type[32];          /* top-level model_type                     */
    int vocab_size;               /* V                                         */
    int hidden_size;              /* H                                         */
    int n_layers;                 /* L (main stack; the MTP layer is extra)    */
    int intermediate_size;        /* I                                         */
    int n_heads, n_kv_heads;      /* Nh, Nkv                                   */
    int head_dim;                 /* hd                                        */
    int attn_output_gate;         /* q_proj emits [query | gate] per head      */
    int linear_k_heads, linear_v_heads;   /* Hk, Hv                            */
    int linear_k_dim, linear_v_dim;       /* Dk, Dv                            */
    int conv_kernel;              /* Kc                                        */
    uint8_t layer_full[CFG_MAX_LAYERS];   /* 1: full attention, 0: Gated DeltaNet */
    double rope_theta;
    double partial_rotary_factor;
    int rotary_dim;               /* rd = int(hd * partial_rotary_factor), even */
    double rms_norm_eps;
    int tie_word_embeddings;
    int max_position_embeddings;
    int mtp_num_hidden_layers;
    int mtp_use_dedicated_embeddings;
    int n_eos;
    int32_t eos_ids[CFG_MAX_EOS];
    /* The MLX "quantization" block (spec §2.6.1), else "quantization_config"
     * (at the top level, else under text_config): modes affine, mxfp4, nvfp4 and mxfp8 (others are NX_EUNSUPPORTED naming
     * the mode). Which modules are quantized is decided by the weights (a
     * <module>.scales tensor), as mlx-lm does; these values are what their
     * shapes must agree with. A Hugging Face quant_method "fp8" block
     * (128 x 128 E4M3 blocks, spec §2.6.3) sets fp8_block instead; other
     * quant_methods are NX_EUNSUPPORTED naming the method. */
    int has_quantization;
    int q_mode;                   /* CFG_Q_*: the block's defaults            */
    int q_bits, q_group;
    int q_sizes_given;            /* 1: the block names bits and group_size;
                                     0: q_bits / q_group are q_mode's defaults */
    int fp8_block;                /* quant_method "fp8", weight_block_size [128, 128] */
    int n_q_overrides;
    cfg_quant_override q_overrides[CFG_MAX_QOVERRIDES];
} cfg_model;

/* Reads and validates config.json in dir, plus generation_config.json if it
 * exists (only its eos_token_id is used). */
nx_status cfg_load_dir(const char *dir, cfg_model *out, char *err, size_t errlen);

/* Parses config text; `name` is used in error messages (e.g. the path). */
nx_status cfg_parse(const char *text, size_t len, const char *name, cfg_model *out,
                    char *err, size_t errlen);

/* The quantization the config declares for a module (path without
 * ".weight"): returns 1 with *mode / *bits / *group set (its override, else
 * the block's defaults), 0 if the block marks it unquantized or there is no
 * MLX block. */
int cfg_quant_for(const cfg_model *c, const char *module, int *mode, int *bits, int *group);
/* 1 if the bits and group_size cfg_quant_for gives module are its mode's
 * defaults because config.json names neither or only one of them (worth
 * saying when the weights disagree). */
int cfg_quant_defaulted(const cfg_model *c, const char *module);

/* Derived sizes. */
static inline int cfg_key_dim(const cfg_model *c) { return c->linear_k_heads * c->linear_k_dim; }
static inline int cfg_value_dim(const cfg_model *c) { return c->linear_v_heads * c->linear_v_dim; }
static inline int cfg_conv_dim(const cfg_model *c) { return 2 * cfg_key_dim(c) + cfg_value_dim(c); }

#endif
