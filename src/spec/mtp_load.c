/* mtp_load.c — a drafter that lives outside the target's weight files: an
 * mlx-vlm-style drafter directory (config.json model_type qwen3_5_mtp, keys
 * without the mtp. prefix, norms already shifted), or an mtp.safetensors
 * file beside the target (keys with the raw mtp. prefix). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "spec/mtp.h"



/* Binds the head from a set whose keys are bare (drafter dir) or carry the
 * raw "mtp." prefix (mtp.safetensors); takes ownership of st. */
nx_status mtp_bind_set(nx_drafter *d, st_set *st, const char *where, char *err, size_t errlen) {
    d->own = st;
    const char *prefix = st_find(st, "mtp.fc.weight") ? "mtp." : st_find(st, "fc.weight") ? "" : NULL;
    if (!prefix) return nx_fail(err, errlen, NX_EFORMAT, "%s: no fc.weight or mtp.fc.weight — not an MTP drafter", where);
    mdl_binder b = {st, where, &d->owned, err, errlen, NULL};
    nx_status s = mtp_bind_head(d, &b, prefix, prefix[0] != 0);
    if (s) return s;
    snprintf(d->source, sizeof d->source, "%s", where);
    d->identity = mtp_head_identity(d, st, prefix);
    return NX_OK;
}

nx_status mtp_load_from_dir(nx_drafter *d, const char *dir, char *err, size_t errlen) {
    const cfg_model *tc = &d->target->cfg;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        int missing = access(path, R_OK) != 0;
        return nx_fail(err, errlen, missing ? NX_EIO : NX_EFORMAT, "%s: %s", path, missing ? "cannot read" : je.text);
    }
    nx_status st = NX_OK;
    const char *type = json_string_value(json_object_get(root, "model_type"));
    json_t *text = json_object_get(root, "text_config");
    if (!type || strcmp(type, "qwen3_5_mtp") != 0) {
        st = nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: not a qwen3_5_mtp drafter (model_type %s)", path, type ? type : "missing");
        goto done;
    }
    if (!json_is_object(text)) {
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: text_config is missing", path);
        goto done;
    }
    const char *ttype = json_string_value(json_object_get(text, "model_type"));
    if (ttype && strncmp(ttype, "qwen3_5", 7) != 0) {
        st = nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: drafter for a %s model, but the target is Qwen3.5", path, ttype);
        goto done;
    }
    json_t *hj = json_object_get(text, "hidden_size"), *vj = json_object_get(text, "vocab_size");
    if (!json_is_integer(hj) || (vj && !json_is_integer(vj))) {
        st = nx_fail(err, errlen, NX_EFORMAT, "%s: text_config.%s %s", path, !json_is_integer(hj) ? "hidden_size" : "vocab_size",
                     (!json_is_integer(hj) ? hj : vj) ? "must be an integer" : "is missing");
        goto done;
    }
    json_int_t H = json_integer_value(hj), V = vj ? json_integer_value(vj) : 0;
    if (H != tc->hidden_size) {
        st = nx_fail(err, errlen, NX_EINVAL, "%s: drafter hidden_size %lld != target %d — split from a different checkpoint?", path,
                     (long long)H, tc->hidden_size);
        goto done;
    }
    if (V && V != tc->vocab_size) {
        st = nx_fail(err, errlen, NX_EINVAL, "%s: drafter vocab_size %lld != target %d — split from a different checkpoint?", path,
                     (long long)V, tc->vocab_size);
        goto done;
    }
    json_t *dedicated = json_object_get(text, "mtp_use_dedicated_embeddings");
    if (json_is_true(dedicated)) {
        st = nx_fail(err, errlen, NX_EUNSUPPORTED, "%s: mtp_use_dedicated_embeddings = true is not supported", path);
        goto done;
    }
    json_t *bs = json_object_get(root, "block_size");
    if (bs) {
        if (!json_is_integer(bs) || json_integer_value(bs) < 2 || json_integer_value(bs) > NX_SPEC_MAX_DRAFT + 1) {
            st = nx_fail(err, errlen, NX_EFORMAT, "%s: block_size must be an integer in [2, %d]", path, NX_SPEC_MAX_DRAFT + 1);
            goto done;
        }
        d->block_size = (int)json_integer_value(bs);
    }
    /* a quantized drafter binds by its tensors' shapes (mdl_bind_mat); MLX
     * modes nextn does not read are refused by name */
    json_t *q = json_object_get(root, "quantization");
    const char *mode = json_string_value(json_object_get(q, "mode"));
    int known = !mode;
    for (int m = CFG_Q_AFFINE; mode && m <= CFG_Q_MXFP8; m++) known |= strcmp(mode, cfg_qmode_name(m)) == 0;
    if (!known) {
        st = nx_fail(err, errlen, NX_EUNSUPPORTED,
                     "%s: quantization mode '%s' is not supported (affine, mxfp4, nvfp4 or mxfp8)", path, mode);
        goto done;
    }
    st_set *set = NULL;
    if ((st = st_open_dir(dir, &set, err, errlen))) goto done;
    st = mtp_bind_set(d, set, dir, err, errlen);
done:
    json_decref(root);
    return st;
}
