/* cache.h — the prefix cache: session checkpoints keyed by the tokens they
 * hold (internal to the engine).
 *
 * Qwen3.5 is a hybrid: its Gated DeltaNet layers carry a recurrent state that
 * cannot be cut back to an earlier position the way a KV cache can. So the
 * cache does not keep per-token KV blocks; it keeps whole checkpoints
 * (nx_spec_snapshot: KV rows + conv/recurrent state + the MTP drafter's
 * entries) taken at chosen boundaries, and a request resumes from the longest
 * checkpoint whose tokens are a prefix of its prompt.
 *
 * Two tiers:
 *   RAM   entries with their blob, least recently used evicted first once the
 *         blobs exceed the byte budget (a blob larger than the whole budget
 *         is kept on disk only -- not at all without a disk tier -- not at
 *         the cost of every other);
 *   disk  (optional) one file per entry in a directory, least recently used
 *         deleted beyond its byte budget, written to a temp file and renamed,
 *         so a crash never leaves half a file under a real name (a temp file
 *         left by one, an hour old, is deleted at the next start: a younger
 *         one may be another server's write in progress). A file's modification
 *         time is its last use, so the order survives a restart.
 *         File: pc_file_header | int32 tokens[n] | blob. The header carries
 *         the namespace (model + drafter identity) and an xxh64 of everything
 *         after it. Files survive restarts: pcache_new indexes the directory
 *         (headers and tokens only). A file that fails its checks when read
 *         is a miss, reported through the log callback and deleted, never a
 *         crash.
 * Lookups compare a 64-bit hash of each entry's tokens with the hash of the
 * prompt's prefix of the same length (one streaming xxh64 pass over the
 * prompt yields the digests at every entry length), then confirm with memcmp.
 *
 * Not thread-safe: the engine thread is the only user; pcache_stats is a
 * plain copy the engine publishes under its own lock. */
#ifndef NX_ENGINE_CACHE_H
#define NX_ENGINE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "nextn.h"

typedef struct pcache pcache;

typedef struct {
    int64_t hits, misses;         /* lookups that found / did not find an entry   */
    int64_t hit_tokens;           /* prompt tokens served from checkpoints        */
    int64_t entries, ram_entries; /* entries indexed (RAM or disk) / held in RAM  */
    int64_t ram_bytes, disk_bytes;
    int64_t evictions;            /* RAM copies dropped for the RAM budget        */
    int64_t disk_evictions;       /* files deleted for the disk budget            */
    int64_t bad_files;            /* disk entries that failed their checks        */
} pcache_stats;

/* Logs one line (a damaged cache file, a write failure); may be NULL. */
typedef void (*pcache_log_fn)(void *ctx, const char *line);

/* ram_bytes: budget of the RAM tier (0: entries only on disk, or none). dir:
 * the disk tier's directory (created if missing), or NULL; disk_bytes: its
 * budget, least recently used files deleted beyond it (0: no limit). ns: the
 * namespace: files of other namespaces in dir (another model, drafter or
 * KV layout, perhaps another server's) are left alone and not counted; their
 * total is logged at start. */
nx_status pcache_new(size_t ram_bytes, const char *dir, size_t disk_bytes, uint64_t ns, pcache_log_fn log, void *log_ctx,
                     pcache **out, char *err, size_t errlen);
void pcache_free(pcache *c);

/* Stores a checkpoint of tokens[0..n): takes ownership of blob (freed with
 * nx_free, now or on eviction). An entry with the same tokens is replaced. */
void pcache_put(pcache *c, const int32_t *tokens, int n, void *blob, size_t len);

/* The longest entry whose tokens are a prefix of tokens[0..n), at least
 * min_len tokens long. Returns its length and sets *blob / *len to a copy the
 * caller frees with nx_free, or returns 0 (a miss). */
int pcache_lookup(pcache *c, const int32_t *tokens, int n, int min_len, void **blob, size_t *len);

/* 1 if an entry holds exactly tokens[0..n). */
int pcache_has(const pcache *c, const int32_t *tokens, int n);

/* Drops the entry of tokens[0..n) that the last lookup returned, whose blob
 * would not restore: that lookup counts as a miss. */
void pcache_drop(pcache *c, const int32_t *tokens, int n);

pcache_stats pcache_get_stats(const pcache *c);

#endif
