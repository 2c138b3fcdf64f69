/* checkpoint.c — save and restore a speculative session at a committed
 * boundary, in memory (nx_spec_snapshot / nx_spec_restore: the prefix cache)
 * or in a file (nx_spec_save / nx_spec_load: the same bytes).
 *
 * The file layout is in checkpoint.h. Identities tie the file to the model
 * and drafter artifacts, so a checkpoint never restores into different
 * weights. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY   /* XXH64_state_t's size: a state on the stack */
#include <xxhash.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/path.h"
#include "spec/checkpoint.h"
#include "spec/spec.h"

#define CKPT_MAX_TOKENS (1 << 30) /* far above any context; keeps n + 1 + ... in int */

/* A section list shared by save and load so the two cannot disagree. A
 * section is `pieces` runs of `bytes` each, `stride` bytes apart in memory
 * (a KV cache's first n rows of each head) and back to back in the blob. */
typedef struct {
    char *p;
    size_t bytes, pieces, stride;
} ckpt_part;

static size_t part_bytes(const ckpt_part *q) { return q->bytes * q->pieces; }

static void part_save(const ckpt_part *q, unsigned char *dst) {
    for (size_t i = 0; i < q->pieces && q->bytes; i++) memcpy(dst + i * q->bytes, q->p + i * q->stride, q->bytes);
}

static void part_load(const ckpt_part *q, const unsigned char *src) {
    for (size_t i = 0; i < q->pieces && q->bytes; i++) memcpy(q->p + i * q->stride, src + i * q->bytes, q->bytes);
}

static int parts_of(nx_spec *s, ckpt_part *parts, int cap) {
    const cfg_model *c = &s->m->cfg;
    size_t hd = (size_t)c->head_dim, Nkv = (size_t)c->n_kv_heads, F = sizeof(float), E = nx_dtype_size(s->m->kv_dtype);
    size_t conv = (size_t)(c->conv_kernel - 1) * (size_t)cfg_conv_dim(c);
    size_t rec = (size_t)c->linear_v_heads * (size_t)c->linear_v_dim * (size_t)c->linear_k_dim;
    size_t H = (size_t)c->hidden_size, n = (size_t)s->n;
    int k = 0;
#define PARTS(ptr, nbytes, npieces, gap) \
    (k < cap ? (parts[k] = (ckpt_part){(char *)(ptr), (nbytes), (npieces), (gap)}, k++) : k)
#define PART(ptr, nbytes) PARTS(ptr, nbytes, 1, 0)
    /* the first `rows` positions of a cache for `max` (mdl_kv's layout), in
     * whole K tiles (for V too: a few rows more, one rule) */
#define KV_PARTS(cache, rows, max) \
    PARTS(cache, (size_t)mdl_kv_cap(rows) * hd * E, Nkv, (size_t)mdl_kv_cap(max) * hd * E)
    PART(s->hist, (n + 1) * sizeof *s->hist);
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_full[l]) {
            KV_PARTS(s->target->k_cache[l], n, s->target->max_ctx);
            KV_PARTS(s->target->v_cache[l], n, s->target->max_ctx);
        } else {
            PART(s->target->conv_state[l], conv * F);
            PART(s->target->recurrent[l], rec * F);
        }
    }
    if (s->d) {
        KV_PARTS(s->rows.k_cache, s->rows.n, s->rows.max_ctx);
        KV_PARTS(s->rows.v_cache, s->rows.n, s->rows.max_ctx);
        PART(s->rows.m, H * F);
        PART(s->defer_tok, (size_t)s->n_defer * sizeof *s->defer_tok);
        PART(s->defer_h, (size_t)s->n_defer * H * F);
    }
#undef KV_PARTS
#undef PART
#undef PARTS
    return k;
}

uint64_t ckpt_hash(const void *blob, size_t len) {
    ckpt_header h;
    memcpy(&h, blob, sizeof h);
    h.payload_hash = 0;
    XXH64_state_t x;   /* on the stack: nothing to fail */
    XXH64_reset(&x, 0);
    XXH64_update(&x, &h, sizeof h);
    XXH64_update(&x, (const unsigned char *)blob + sizeof h, len - sizeof h);
    return XXH64_digest(&x);
}

static void header_of(const nx_spec *s, ckpt_header *h) {
    const cfg_model *c = &s->m->cfg;
    memset(h, 0, sizeof *h);
    memcpy(h->magic, CKPT_MAGIC, 8);
    h->version = CKPT_VERSION;
    h->header_bytes = sizeof *h;
    h->target_id = s->m->identity;
    h->drafter_id = s->d ? s->d->identity : 0;
    h->n = s->n;
    h->rows = s->d ? s->rows.n : 0;
    h->n_defer = s->n_defer;
    h->d1 = s->d1;
    h->n_input = s->n_input;
    h->n_layers = c->n_layers;
    h->n_kv_heads = c->n_kv_heads;
    h->head_dim = c->head_dim;
    h->conv_floats = (c->conv_kernel - 1) * cfg_conv_dim(c);
    h->rec_floats = c->linear_v_heads * c->linear_v_dim * c->linear_k_dim;
    h->hidden = c->hidden_size;
    h->vocab = c->vocab_size;
}

nx_status nx_spec_snapshot(const nx_spec *cs, void **blob, size_t *len, char *err, size_t errlen) {
    nx_spec *s = (nx_spec *)cs; /* parts_of hands out pointers; nothing of the session's meaning is written */
    *blob = NULL;
    *len = 0;
    if (s->state != SPEC_READY)
        return nx_fail(err, errlen, NX_ESTATE, "snapshot: the session is not at a committed boundary (state %d)", s->state);
    mdl_state_settle(s->target);   /* the recurrent state as it stands: a rollback's updates applied */
    ckpt_part parts[4 * CFG_MAX_LAYERS + 8];
    int np = parts_of(s, parts, (int)(sizeof parts / sizeof *parts));
    ckpt_header h;
    header_of(s, &h);
    for (int i = 0; i < np; i++) h.payload_bytes += part_bytes(&parts[i]);
    unsigned char *out = nx_alloc_big(sizeof h + h.payload_bytes);
    if (!out) return nx_fail(err, errlen, NX_ENOMEM, "snapshot: out of memory for %llu bytes",
                             (unsigned long long)(sizeof h + h.payload_bytes));
    size_t at = sizeof h;
    for (int i = 0; i < np; i++) {
        part_save(&parts[i], out + at);
        at += part_bytes(&parts[i]);
    }
    memcpy(out, &h, sizeof h);
    h.payload_hash = ckpt_hash(out, at);
    memcpy(out, &h, sizeof h);
    *blob = out;
    *len = at;
    return NX_OK;
}

/* The file nx_spec_save writes: path, or the target of a symbolic link at
 * path (a link to a file not there yet: its text, beside the link), into
 * target; *sb and *exists describe it. A path that is not a regular file (a
 * device, a directory) is refused rather than replaced. */
static nx_status save_target(const char *path, char target[PATH_MAX], struct stat *sb, int *exists, char *err,
                             size_t errlen) {
    const nx_status st = nx_path_target(path, target, err, errlen);
    if (st) return st;
    *exists = stat(target, sb) == 0;
    if (*exists && !S_ISREG(sb->st_mode))
        return nx_fail(err, errlen, NX_EINVAL, "%s: not a regular file; a checkpoint is not written over it", path);
    return NX_OK;
}

nx_status nx_spec_save_check(const char *path, char *err, size_t errlen) {
    char target[PATH_MAX];
    struct stat sb;
    int exists;
    const nx_status st = save_target(path, target, &sb, &exists, err, errlen);
    if (st) return st;
    /* the save's own step: a file made beside the target (removed at once) */
    const int why = nx_path_probe(target);
    if (why) return nx_fail(err, errlen, NX_EIO, "%s: cannot write the checkpoint: %s", path, strerror(why));
    return NX_OK;
}

nx_status nx_spec_save(const nx_spec *s, const char *path, char *err, size_t errlen) {
    void *blob;
    size_t len;
    nx_status st = nx_spec_snapshot(s, &blob, &len, err, errlen);
    if (st) {
        if (st == NX_ESTATE) return nx_fail(err, errlen, NX_ESTATE, "save: the session is not at a committed boundary");
        return st;
    }
    /* written to a file of its own beside the target, then renamed over it,
     * so that a reader never sees half a checkpoint */
    char target[PATH_MAX], tmp[PATH_MAX + 16];
    struct stat sb;
    int exists;
    if ((st = save_target(path, target, &sb, &exists, err, errlen))) {
        nx_free(blob);
        return st;
    }
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", target);
    int fd = mkstemp(tmp);   /* mode 0600: a new checkpoint (a conversation) is its owner's; a replaced one keeps its mode */
    if (fd >= 0 && exists) (void)fchmod(fd, sb.st_mode & 07777);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (fd >= 0 && !f) close(fd);
    int ok = f && fwrite(blob, len, 1, f) == 1;
    if (f) ok = (fclose(f) == 0) && ok;
    const int saved = errno;
    nx_free(blob);
    if (!ok || rename(tmp, target) != 0) {
        const int why = ok ? errno : saved;
        if (fd >= 0) remove(tmp);
        return nx_fail(err, errlen, NX_EIO, "%s: cannot write the checkpoint: %s", path, strerror(why));
    }
    return NX_OK;
}

/* Restores from blob; `name` (a path, or "snapshot") is used in messages. */
static nx_status restore(nx_spec *s, const unsigned char *blob, size_t len, const char *name, char *err, size_t errlen) {
    if (s->state != SPEC_FRESH)
        return nx_fail(err, errlen, NX_ESTATE, "load: a checkpoint restores only into a fresh session (this one is in use)");
    ckpt_header h, want;
    header_of(s, &want);
    if (len < sizeof h) return nx_fail(err, errlen, NX_EFORMAT, "%s: not a nextn checkpoint (or another version)", name);
    memcpy(&h, blob, sizeof h);
    if (memcmp(h.magic, CKPT_MAGIC, 8) != 0 || h.version != CKPT_VERSION || h.header_bytes != sizeof h)
        return nx_fail(err, errlen, NX_EFORMAT, "%s: not a nextn checkpoint (or another version)", name);
    /* the identities cover the load options that change a state's bytes (a
     * KV cache of halves, f32 activations of a quantized model; a drafter's
     * hidden rows), so a mismatch may be an option, not other weights */
    if (h.target_id != want.target_id)
        return nx_fail(err, errlen, NX_EINVAL,
                       "%s: the checkpoint is from another model, or the same one loaded with another KV cache type or "
                       "activation mode (identity %016llx, this model %016llx)",
                       name, (unsigned long long)h.target_id, (unsigned long long)want.target_id);
    if (h.drafter_id != want.drafter_id && (!h.drafter_id || !want.drafter_id))
        return nx_fail(err, errlen, NX_EINVAL, "%s: the checkpoint was saved %s a drafter; this session has %s", name,
                       h.drafter_id ? "with" : "without", want.drafter_id ? "one" : "none");
    if (h.drafter_id != want.drafter_id)
        return nx_fail(err, errlen, NX_EINVAL,
                       "%s: the checkpoint is from another drafter, or the same one reading other hidden rows "
                       "(identity %016llx, this one %016llx)",
                       name, (unsigned long long)h.drafter_id, (unsigned long long)want.drafter_id);
    if (h.n_layers != want.n_layers || h.n_kv_heads != want.n_kv_heads || h.head_dim != want.head_dim || h.conv_floats != want.conv_floats || h.rec_floats != want.rec_floats ||
        h.hidden != want.hidden || h.vocab != want.vocab || h.n < 1 || h.n >= CKPT_MAX_TOKENS || h.rows < 0 || h.n_defer < 0 || h.n_defer > SPEC_MAX_DEFER ||
        (s->d && h.rows + h.n_defer > h.n) || (!s->d && (h.rows != 0 || h.n_defer != 0)) || h.rows > h.n || h.d1 < 0 ||
        h.n_input < 0 || h.n_input > h.n + 1 ||
        h.d1 >= want.vocab)
        return nx_fail(err, errlen, NX_EFORMAT, "%s: the checkpoint's sizes do not fit this model", name);
    /* its pending token needs a position; drafts shorten near the end */
    if (h.n + 1 > s->max_ctx)
        return nx_fail(err, errlen, NX_ERANGE, "%s: the checkpoint holds %d tokens; the session's context of %d is too small", name,
                       h.n + 1, s->max_ctx);
    /* the whole payload is checked before any of it is copied: a damaged
     * blob leaves the session FRESH and untouched */
    if (h.payload_bytes != len - sizeof h || ckpt_hash(blob, len) != h.payload_hash)
        return nx_fail(err, errlen, NX_EFORMAT, "%s: the checkpoint is truncated or damaged (checksum mismatch)", name);
    s->n = h.n;
    s->n_input = h.n_input;
    if (s->d) s->rows.n = s->mtp_committed = h.rows;
    s->n_defer = h.n_defer;
    ckpt_part parts[4 * CFG_MAX_LAYERS + 8];
    int np = parts_of(s, parts, (int)(sizeof parts / sizeof *parts));
    size_t total = 0;
    for (int i = 0; i < np; i++) total += part_bytes(&parts[i]);
    int ok = total == h.payload_bytes;
    for (size_t i = 0, at = sizeof h; ok && i < (size_t)np; at += part_bytes(&parts[i]), i++)
        part_load(&parts[i], blob + at);
    /* the checksum guards against damage, not forgery: every token the
     * session will look up (the sequence, and the deferred entries the head
     * reads embedding rows for) must be a row of this vocabulary */
    for (int i = 0; ok && i <= h.n; i++) ok = s->hist[i] >= 0 && s->hist[i] < want.vocab;
    for (int i = 0; ok && i < s->n_defer; i++) ok = s->defer_tok[i] >= 0 && s->defer_tok[i] < want.vocab;
    if (!ok) {
        /* back to FRESH: nothing of the bad blob may be used */
        nx_state_reset(s->target);
        s->n = 0;
        s->n_defer = 0;
        if (s->d) s->rows.n = s->mtp_committed = 0;
        return nx_fail(err, errlen, NX_EFORMAT, "%s: the checkpoint's contents do not fit this model", name);
    }
    s->target->pos = h.n;
    s->target->rb.pending = 0;   /* the loaded state is whole */
    s->d1 = h.d1;
    /* the saved draft came from the saving drafter's head; this one may
     * draft over another vocabulary (--draft-vocab) or through a screen, so
     * draft again from the saved m, which is what an uninterrupted run with
     * it would hold (a sampled draft drawn again from the same stream) */
    if (s->d && h.rows > 0 && h.n_defer == 0) s->d1 = spec_head_draft(s, 0);
    s->state = SPEC_READY;
    return NX_OK;
}

nx_status nx_spec_restore(nx_spec *s, const void *blob, size_t len, char *err, size_t errlen) {
    return restore(s, blob, len, "snapshot", err, errlen);
}

nx_status nx_spec_load(nx_spec *s, const char *path, char *err, size_t errlen) {
    if (s->state != SPEC_FRESH)
        return nx_fail(err, errlen, NX_ESTATE, "load: a checkpoint restores only into a fresh session (this one is in use)");
    FILE *f = fopen(path, "rb");
    if (!f) return nx_fail(err, errlen, NX_EIO, "%s: cannot read (%s)", path, strerror(errno));
    unsigned char *blob = NULL;
    struct stat sb;
    const int regular = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode);   /* a directory opens too */
    const size_t len = regular ? (size_t)sb.st_size : 0;
    nx_status st = NX_OK;
    if (!regular) st = nx_fail(err, errlen, NX_EIO, "%s: not a regular file", path);
    else if (!(blob = nx_alloc(len ? len : 1))) st = nx_fail(err, errlen, NX_ENOMEM, "%s: out of memory", path);
    else if (len && fread(blob, len, 1, f) != 1) st = nx_fail(err, errlen, NX_EIO, "%s: cannot read", path);
    fclose(f);
    if (!st) st = restore(s, blob, len, path, err, errlen);
    nx_free(blob);
    return st;
}

int nx_spec_checkpoint_tokens(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    ckpt_header h;
    int ok = fread(&h, sizeof h, 1, f) == 1 && memcmp(h.magic, CKPT_MAGIC, 8) == 0 && h.version == CKPT_VERSION && h.n >= 1 &&
             h.n < CKPT_MAX_TOKENS;
    fclose(f);
    return ok ? h.n + 1 : -1;
}
