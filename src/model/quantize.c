/* quantize.c — write an mlx-community-style quantized checkpoint, affine or
 * mxfp4 / nvfp4 / mxfp8 (nx_quantize, nextn.h).
 *
 * The output is what mlx-lm / mlx-vlm conversions produce (spec §2.4,
 * §2.6.1), so that nextn and MLX tools read it alike:
 *   - names: model.language_model.X -> language_model.model.X, lm_head ->
 *     language_model.lm_head, mtp.X -> language_model.mtp.X (the MTP head
 *     stays in the target's file, as third-party MLX conversions keep it,
 *     and one kept in an mtp.safetensors beside the weights moves into it);
 *   - zero-centred norm weights stored as 1 + w, conv1d as [CD, Kc, 1];
 *   - every matrix whose columns are a multiple of the group, embeddings
 *     included, as <module>.weight U32 + .scales + .biases in the source
 *     dtype (affine) or <module>.weight U32 + .scales U8 (mxfp4, nvfp4,
 *     mxfp8; kernels/fpq.h); norms, conv1d, A_log, dt_bias stay as they are;
 *   - config.json gains "quantization" and "quantization_config" blocks.
 * The input is loaded (and so fully validated) with nx_model_load first. */
#include <errno.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/fp16.h"
#include "base/str.h"
#include "kernels/fpq.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "model/model.h"

/* Zero-centred RMSNorm weights (spec §3.2): every norm but the gated
 * norm of the Gated DeltaNet (linear_attn.norm), which is used as stored. */
static int is_zero_centred_norm(const char *name, const char *prefix) {
    static const char *const suffixes[] = {"input_layernorm.weight", "post_attention_layernorm.weight", "q_norm.weight",
                                           "k_norm.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight"};
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++)
        if (nx_ends_with(name, suffixes[i])) return 1;
    char final[160];
    snprintf(final, sizeof final, "%snorm.weight", prefix);
    return strcmp(name, final) == 0 || strcmp(name, "mtp.norm.weight") == 0;
}

static int is_mtp(const char *name) { return strncmp(name, "mtp.", 4) == 0 || strstr(name, ".mtp.") != NULL; }

/* The mlx-community name of a raw HF (or already MLX) tensor name; "" for a
 * tensor the text model does not use (the vision tower). */
static void mlx_name(const nx_model *m, const char *name, char *out, size_t n) {
    const char *rest;
    if (strncmp(name, "language_model.", 15) == 0) snprintf(out, n, "%s", name);
    else if (strncmp(name, "mtp.", 4) == 0) snprintf(out, n, "language_model.%s", name);
    else if (strcmp(name, "lm_head.weight") == 0) snprintf(out, n, "language_model.lm_head.weight");
    else if (strncmp(name, m->prefix, strlen(m->prefix)) == 0 && *(rest = name + strlen(m->prefix)))
        snprintf(out, n, "language_model.model.%s", rest);
    else snprintf(out, n, "%s", "");
}

static nx_status copy_file(const char *from, const char *to, char *err, size_t errlen) {
    FILE *in = fopen(from, "rb");
    if (!in) return NX_OK;                       /* optional files */
    FILE *out = fopen(to, "wb");
    nx_status st = NX_OK;
    char buf[65536];
    size_t k;
    if (!out) st = nx_fail(err, errlen, NX_EIO, "%s: cannot create: %s", to, strerror(errno));
    while (!st && (k = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, k, out) != k) st = nx_fail(err, errlen, NX_EIO, "%s: write failed", to);
    if (!st && ferror(in)) st = nx_fail(err, errlen, NX_EIO, "%s: read failed: %s", from, strerror(errno));
    if (out && fclose(out) && !st) st = nx_fail(err, errlen, NX_EIO, "%s: write failed", to);
    fclose(in);
    return st;
}

/* The MLX modes by nx_quant_mode: their names and, for the small-float
 * ones, their fixed bits and group (affine's are the caller's). */
static const struct { const char *name; int bits, group; } modes[] = {
    [NX_QUANT_AFFINE] = {"affine", 0, 0}, [NX_QUANT_MXFP4] = {"mxfp4", 4, 32},
    [NX_QUANT_NVFP4] = {"nvfp4", 4, 16},  [NX_QUANT_MXFP8] = {"mxfp8", 8, 32},
};

const char *nx_quant_mode_info(nx_quant_mode mode, int *bits, int *group) {
    if ((unsigned)mode > NX_QUANT_MXFP8) return NULL;
    if (bits) *bits = modes[mode].bits;
    if (group) *group = modes[mode].group;
    return modes[mode].name;
}

/* config.json with the quantization block added (both spellings, as mlx-lm writes). */
static nx_status write_config(const char *in_dir, const char *out_dir, const nx_quantize_opts *o, char *err,
                              size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", in_dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return nx_fail(err, errlen, NX_EFORMAT, "%s: %s", path, je.text);
    json_t *q = json_pack("{s:i, s:i, s:s}", "group_size", o->group_size, "bits", o->bits, "mode", modes[o->mode].name);
    int bad = !q || json_object_set(root, "quantization", q) || json_object_set_new(root, "quantization_config", q);
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    bad = bad || json_dump_file(root, path, JSON_INDENT(2)) != 0;
    json_decref(root);
    return bad ? nx_fail(err, errlen, NX_EIO, "%s: cannot write", path) : NX_OK;
}

/* Appends the quantization of t (a [rows, cols] float matrix) under
 * <module>.weight / .scales (/ .biases for affine). */
static nx_status add_quantized(st_writer *w, const st_tensor *t, const char *name, const nx_quantize_opts *o,
                               char *err, size_t errlen) {
    int64_t rows = t->shape[0], cols = t->shape[1], words = cols * o->bits / 32, groups = cols / o->group_size;
    const kn_fp_mode fp = o->mode == NX_QUANT_MXFP4 ? KN_FP_MXFP4 : o->mode == NX_QUANT_NVFP4 ? KN_FP_NVFP4
                        : o->mode == NX_QUANT_MXFP8 ? KN_FP_MXFP8 : KN_FP_NONE;
    nx_dtype sdt = fp ? NX_DT_U8 : t->dtype;
    size_t ssz = nx_dtype_size(sdt);
    uint32_t *codes = nx_alloc_aligned((size_t)(rows * words) * 4);
    char *scales = nx_alloc_aligned((size_t)(rows * groups) * ssz), *biases = nx_alloc_aligned((size_t)(rows * groups) * ssz);
    float *row = nx_alloc_aligned((size_t)cols * sizeof(float));
    nx_status st = NX_OK;
    if (!codes || !scales || !biases || !row) st = nx_fail(err, errlen, NX_ENOMEM, "out of memory quantizing '%s'", t->name);
    size_t esz = nx_dtype_size(t->dtype);
    for (int64_t r = 0; !st && r < rows; r++) {
        kn_to_f32(t->dtype, (const char *)t->data + (size_t)(r * cols) * esz, row, cols);
        for (int64_t c = 0; c < cols && !st; c++)
            if (!isfinite(row[c]))
                st = nx_fail(err, errlen, NX_EFORMAT, "%s: tensor '%s' has a non-finite weight at row %lld, column %lld",
                             t->file, t->name, (long long)r, (long long)c);
        if (st) break;
        if (fp) kn_fp_quantize_row(row, cols, fp, codes + r * words, (uint8_t *)scales + r * groups);
        else kn_affine_quantize_row(row, cols, o->bits, o->group_size, sdt, codes + r * words, scales + (size_t)(r * groups) * ssz,
                                    biases + (size_t)(r * groups) * ssz);
    }
    char module[300], n[320];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(name) - 7), name);   /* drop ".weight" */
    int64_t wshape[2] = {rows, words}, sshape[2] = {rows, groups};
    if (!st) snprintf(n, sizeof n, "%s.weight", module), st = st_writer_add(w, n, NX_DT_U32, 2, wshape, codes, (size_t)(rows * words) * 4, err, errlen);
    if (!st) snprintf(n, sizeof n, "%s.scales", module), st = st_writer_add(w, n, sdt, 2, sshape, scales, (size_t)(rows * groups) * ssz, err, errlen);
    if (!st && !fp) snprintf(n, sizeof n, "%s.biases", module), st = st_writer_add(w, n, sdt, 2, sshape, biases, (size_t)(rows * groups) * ssz, err, errlen);
    nx_free_aligned(codes), nx_free_aligned(scales), nx_free_aligned(biases), nx_free_aligned(row);
    return st;
}

/* A zero-centred norm stored as 1 + w, in its own dtype. */
static nx_status add_shifted_norm(st_writer *w, const st_tensor *t, const char *name, char *err, size_t errlen) {
    float *v = nx_alloc_aligned((size_t)t->numel * sizeof(float));
    void *out = nx_alloc_aligned(t->nbytes);
    nx_status st = NX_OK;
    if (!v || !out) st = nx_fail(err, errlen, NX_ENOMEM, "out of memory");
    if (!st) {
        kn_to_f32(t->dtype, t->data, v, t->numel);
        for (int64_t i = 0; i < t->numel; i++) v[i] += 1.0f;
        for (int64_t i = 0; i < t->numel; i++) {
            if (t->dtype == NX_DT_F32) ((float *)out)[i] = v[i];
            else ((uint16_t *)out)[i] = t->dtype == NX_DT_BF16 ? nx_f32_to_bf16(v[i]) : nx_f32_to_f16(v[i]);
        }
        st = st_writer_add(w, name, t->dtype, t->ndim, t->shape, out, t->nbytes, err, errlen);
    }
    nx_free_aligned(v), nx_free_aligned(out);
    return st;
}

/* Appends t to w under the mlx-community name of `raw` (t's name, or for a
 * bare key of an mtp.safetensors "mtp." + the key), quantized where it is a
 * matrix the mode takes; counts it in r. norms_shifted: t's zero-centred
 * norms hold 1 + w already (a bare-key head, as a drafter directory keeps
 * them). */
static nx_status add_tensor(st_writer *w, const nx_model *m, const st_tensor *t, const char *raw, int norms_shifted,
                            const nx_quantize_opts *o, nx_quantize_report *r, char *err, size_t errlen) {
    char name[300];
    mlx_name(m, raw, name, sizeof name);
    if (!name[0]) return NX_OK;
    r->bytes_in += (int64_t)t->nbytes;
    r->tensors++;
    int is_float = t->dtype == NX_DT_F32 || t->dtype == NX_DT_BF16 || t->dtype == NX_DT_F16;
    if (nx_ends_with(raw, "conv1d.weight") && t->ndim == 3 && t->shape[1] == 1) {
        /* [CD, 1, Kc] -> [CD, Kc, 1]: the same bytes in the same order */
        int64_t shape[3] = {t->shape[0], t->shape[2], 1};
        return st_writer_add(w, name, t->dtype, 3, shape, t->data, t->nbytes, err, errlen);
    }
    if (!norms_shifted && (!m->layout_mlx || strncmp(raw, "mtp.", 4) == 0) && is_float && is_zero_centred_norm(raw, m->prefix))
        /* raw norms: every one in a raw HF file, and a raw mtp.* head kept
         * inline in an MLX file or beside it (the loader shifts exactly those) */
        return add_shifted_norm(w, t, name, err, errlen);
    if (is_float && t->ndim == 2 && nx_ends_with(raw, ".weight") && !strstr(raw, "norm") &&
        t->shape[1] % o->group_size == 0 && !(o->keep_mtp_dense && is_mtp(raw)) &&
        (o->mode == NX_QUANT_AFFINE || t->shape[1] <= KN_FP_MAX_COLS)) {
        r->quantized++;
        return add_quantized(w, t, name, o, err, errlen);
    }
    return st_writer_add(w, name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, err, errlen);
}

/* The text model's files besides the weights, copied where the input has
 * them, as an mlx-lm conversion writes them (a slow tokenizer's vocab.json
 * and merges.txt too; the vision tower's preprocessor_config.json goes with
 * the tower's weights, left out). */
static const char *const side_files[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                                         "chat_template.jinja", "special_tokens_map.json", "added_tokens.json",
                                         "vocab.json", "merges.txt"};

/* After a failed run: the files it wrote to out_dir (empty when it began,
 * so every such name is its own) go, and out_dir too if the run made it;
 * a rerun would find it not empty. */
static void remove_in(const char *dir, const char *const names[], size_t n) {
    char path[4096];
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
}

static void remove_outputs(const char *out_dir, int made_dir) {
    static const char *const own[] = {"model.safetensors", "model.safetensors.tmp", "config.json"};
    remove_in(out_dir, own, sizeof own / sizeof *own);
    remove_in(out_dir, side_files, sizeof side_files / sizeof *side_files);
    if (made_dir) rmdir(out_dir);
}

/* 1 if dir has no entries but . and .. (or cannot be read: mkdir reports that). */
static int dir_is_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 1;
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty;
}

nx_status nx_quantize(const char *in_dir, const char *out_dir, const nx_quantize_opts *opts, nx_quantize_report *rep,
                      char *err, size_t errlen) {
    nx_quantize_opts o = *opts;
    if (o.mode < NX_QUANT_AFFINE || o.mode > NX_QUANT_MXFP8)
        return nx_fail(err, errlen, NX_EINVAL, "quantize: unknown mode %d", (int)o.mode);
    if (o.mode != NX_QUANT_AFFINE) {
        if ((o.bits && o.bits != modes[o.mode].bits) || (o.group_size && o.group_size != modes[o.mode].group))
            return nx_fail(err, errlen, NX_EINVAL, "quantize: mode %s takes bits %d and group size %d (got %d, %d)",
                           modes[o.mode].name, modes[o.mode].bits, modes[o.mode].group, o.bits, o.group_size);
        o.bits = modes[o.mode].bits, o.group_size = modes[o.mode].group;
    }
    if (!o.group_size) o.group_size = 64;
    if (o.mode == NX_QUANT_AFFINE && !(o.bits == 2 || o.bits == 3 || o.bits == 4 || o.bits == 5 || o.bits == 6 || o.bits == 8))
        return nx_fail(err, errlen, NX_EINVAL, "quantize: bits %d (affine takes 2, 3, 4, 5, 6 or 8)", o.bits);
    if (o.mode == NX_QUANT_AFFINE && !(o.group_size == 32 || o.group_size == 64 || o.group_size == 128))
        return nx_fail(err, errlen, NX_EINVAL, "quantize: group size %d (affine takes 32, 64 or 128)", o.group_size);
    struct stat a, b;
    if (stat(in_dir, &a) == 0 && stat(out_dir, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
        return nx_fail(err, errlen, NX_EINVAL, "quantize: the output directory %s is the input", out_dir);
    /* the output's own faults before the input's load, which takes a while */
    if (stat(out_dir, &b) == 0 && !S_ISDIR(b.st_mode))
        return nx_fail(err, errlen, NX_EINVAL, "quantize: the output %s exists and is not a directory", out_dir);
    if (!dir_is_empty(out_dir))   /* stale shards or an index there would be loaded instead of the new file */
        return nx_fail(err, errlen, NX_EINVAL, "quantize: the output directory %s is not empty", out_dir);
    nx_model *m = NULL;
    nx_load_opts lo = {.n_threads = 1};
    nx_status st = nx_model_load(in_dir, &lo, &m, err, errlen);
    if (st) return st;
    st_writer *w = NULL;
    nx_quantize_report r = {0};
    int made_dir = 0, wrote = 0;
    if (m->cfg.has_quantization || m->cfg.fp8_block) {
        st = nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: already quantized (config.json has a quantization block)", in_dir);
        goto done;
    }
    if (mkdir(out_dir, 0755) == 0) made_dir = 1;
    else if (errno != EEXIST) {
        st = nx_fail(err, errlen, NX_EIO, "%s: cannot create: %s", out_dir, strerror(errno));
        goto done;
    }
    wrote = 1;
    if ((st = st_writer_new(&w, err, errlen))) goto done;
    for (int i = 0; !st && i < st_count(m->st); i++) {
        const st_tensor *t = st_at(m->st, i);
        st = add_tensor(w, m, t, t->name, 0, &o, &r, err, errlen);
    }
    /* a head kept in an mtp.safetensors beside the weights joins the others
     * in the one file, as language_model.mtp.*: an MLX checkpoint keeps it
     * inline. Its keys are raw ("mtp." prefix, norms as w: shifted here, as
     * a raw file's) or bare (norms as 1 + w), as the drafter loader reads
     * them; a head quantized already is refused, as a quantized input is. */
    char from[4096], to[4096];
    snprintf(from, sizeof from, "%s/mtp.safetensors", in_dir);
    if (!st && !m->n_mtp_tensors && access(from, R_OK) == 0) {
        st_set *head = NULL;
        st = st_open_file(from, &head, err, errlen);
        const int bare = head && !st_find(head, "mtp.fc.weight");
        for (int i = 0; !st && i < st_count(head); i++) {
            const st_tensor *t = st_at(head, i);
            char raw[300];
            snprintf(raw, sizeof raw, "%s%s", bare ? "mtp." : "", t->name);
            if (t->dtype == NX_DT_U32 || nx_ends_with(t->name, ".scales"))
                st = nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: already quantized (tensor '%s')", from, t->name);
            else st = add_tensor(w, m, t, raw, bare, &o, &r, err, errlen);
        }
        st_close(head);
    }
    snprintf(to, sizeof to, "%s/model.safetensors", out_dir);
    if (!st) st = st_writer_write(w, to, err, errlen);
    r.bytes_out = w ? (int64_t)st_writer_bytes(w) : 0;
    if (!st) st = write_config(in_dir, out_dir, &o, err, errlen);
    for (size_t i = 0; !st && i < sizeof side_files / sizeof *side_files; i++) {
        snprintf(from, sizeof from, "%s/%s", in_dir, side_files[i]);
        snprintf(to, sizeof to, "%s/%s", out_dir, side_files[i]);
        st = copy_file(from, to, err, errlen);
    }
    r.bits = o.bits, r.group_size = o.group_size;
    if (!st && rep) *rep = r;
done:
    if (st && wrote) remove_outputs(out_dir, made_dir);
    st_writer_free(w);
    nx_model_free(m);
    return st;
}
