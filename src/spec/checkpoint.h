/* checkpoint.h — the header of a checkpoint file (checkpoint.c writes and
 * reads it; nextn.h "Checkpoints" is the API). Here so that tools and tests
 * that edit a checkpoint on purpose read the same layout as the loader.
 *
 * After the header (little endian, this machine's float format):
 *   int32 hist[n + 1]              the sequence, pending token last
 *   per target layer:  attention   K[Nkv][n][hd], V[Nkv][n][hd]
 *                      GDN         conv[Kc-1][CD], recurrent[Hv][Dv][Dk]
 *   drafter (if any):  K[Nkv][rows][hd], V[Nkv][rows][hd], m[H],
 *                      deferred tokens[n_defer], deferred hiddens[n_defer][H]
 * payload_hash (ckpt_hash) covers the header (its payload_hash as 0) and
 * everything after it: a check against damage, not forgery, so the loader
 * validates what it reads too. */
#ifndef NX_SPEC_CHECKPOINT_H
#define NX_SPEC_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MAGIC "NXSPEC01"
#define CKPT_VERSION 5   /* 5: the hash covers the header; 4: n_input; 3: K in tiles of positions (2: K rows head by head; 1: position by position) */

typedef struct {
    char magic[8];                      /* CKPT_MAGIC, no NUL            */
    uint32_t version, header_bytes;     /* CKPT_VERSION, sizeof itself   */
    uint64_t target_id, drafter_id;     /* identities (0: no drafter)    */
    int32_t n, rows, n_defer, d1;       /* tokens, drafter rows, deferred entries, pending draft */
    int32_t n_layers, n_kv_heads, head_dim, conv_floats, rec_floats, hidden, vocab;
    int32_t n_input;                    /* tokens of input (the penalties' split) */
    uint64_t payload_bytes, payload_hash;
} ckpt_header;
_Static_assert(sizeof(ckpt_header) == 96, "the checkpoint header is 96 bytes on disk");

/* The payload_hash a checkpoint of len >= sizeof(ckpt_header) bytes should
 * carry: xxh64 (seed 0) of its header with payload_hash as 0, then of the
 * rest. */
uint64_t ckpt_hash(const void *blob, size_t len);

#endif
