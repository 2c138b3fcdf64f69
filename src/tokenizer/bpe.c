/* bpe.c — byte-level BPE: hash tables, the merge loops, the piece cache.
 *
 * The merge order is Hugging Face's Word::merge_all: candidate pairs sit in a
 * heap keyed (rank, position of the left symbol); a popped entry is dropped if
 * the pair there no longer merges to the same id. The merged id names the
 * concatenated string and a symbol's start never moves, so a stale entry can
 * never pass that check (unless two vocab strings share an id), and the order
 * is exactly "lowest rank first, leftmost on ties" over the current pairs.
 * Three loops compute it; the tests check that they agree:
 *   merge_scan        that rule literally, O(n^2): words up to NX_TOK_SMALL_WORD
 *   nx_tok_merge_heap HF's heap (4-ary), O(n log n): the reference for long words
 *   nx_tok_merge_buckets  rank levels, ~O(n): long words when the merge list is
 *                     rank-monotone here (it gives up otherwise -> heap)
 * A run of 20,000 identical letters is ONE piece under the Qwen regex, so the
 * long-word loops matter.
 *
 * Pieces up to NX_TOK_CACHE_MAX_BYTES are cached (raw bytes -> ids) in a
 * sharded, direct-mapped table; each shard has its own mutex.
 */
#include "tokenizer/tokenizer.h"

#include <limits.h>
#include <string.h>

#include "base/alloc.h"

/* ---- hashing ------------------------------------------------------------------ */

static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* A small multiply-xorshift hash (splitmix64 finaliser per 8-byte word). It
 * only has to spread token strings and pieces over power-of-two tables. */
uint64_t nx_tok_hash(const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        h = (h ^ rd64(p)) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t tail = 0;
    memcpy(&tail, p, n);
    h = (h ^ tail) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h;
}

/* ---- string -> id ----------------------------------------------------------------- */

int nx_tok_strmap_init(nx_tok_strmap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    m->slots = nx_alloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++) m->slots[i].id = -1;
    m->mask = (uint32_t)(cap - 1);
    m->count = 0;
    return 0;
}

void nx_tok_strmap_free(nx_tok_strmap *m) {
    nx_free(m->slots);
    m->slots = NULL;
}

int32_t nx_tok_strmap_get(const nx_tok_strmap *m, const char *arena, const char *s, size_t n) {
    if (!m->slots) return -1;
    uint64_t h = nx_tok_hash(s, n);
    uint32_t h32 = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & m->mask;; i = (i + 1) & m->mask) {
        const nx_tok_strslot *e = &m->slots[i];
        if (e->id < 0) return -1;
        if (e->hash == h32 && e->len == n && memcmp(arena + e->off, s, n) == 0) return e->id;
    }
}

int nx_tok_strmap_put(nx_tok_strmap *m, const char *arena, uint32_t off, uint32_t len, int32_t id) {
    /* Sized by the caller (the number of keys is known up front); never past 3/4. */
    if ((size_t)(m->count + 1) * 4 > ((size_t)m->mask + 1) * 3) return -1;
    uint64_t h = nx_tok_hash(arena + off, len);
    uint32_t h32 = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & m->mask;; i = (i + 1) & m->mask) {
        nx_tok_strslot *e = &m->slots[i];
        if (e->id < 0) {
            *e = (nx_tok_strslot){h32, off, len, id};
            m->count++;
            return 0;
        }
        if (e->hash == h32 && e->len == len && memcmp(arena + e->off, arena + off, len) == 0) {
            e->id = id;
            return 0;
        }
    }
}

/* ---- (left, right) -> (rank, merged id) ------------------------------------------- */

int nx_tok_pairmap_init(nx_tok_pairmap *m, size_t expected) {
    int bits = 4;
    while (((size_t)1 << bits) < expected * 2) bits++;
    size_t cap = (size_t)1 << bits;
    m->slots = nx_alloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    m->shift = 64 - bits;
    return 0;
}

void nx_tok_pairmap_free(nx_tok_pairmap *m) {
    nx_free(m->slots);
    m->slots = NULL;
}

static inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static inline size_t pair_home(const nx_tok_pairmap *m, uint64_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> m->shift);
}

/* A later duplicate of a pair overwrites the earlier one, as HF's HashMap does. */
void nx_tok_pairmap_put(nx_tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t new_id) {
    uint64_t key = pair_key(a, b);
    for (size_t i = pair_home(m, key);; i = (i + 1) & m->mask) {
        nx_tok_pairslot *e = &m->slots[i];
        if (e->key == UINT64_MAX || e->key == key) {
            *e = (nx_tok_pairslot){key, rank, new_id};
            return;
        }
    }
}

static inline const nx_tok_pairslot *pair_get(const nx_tok_pairmap *m, int32_t a, int32_t b) {
    uint64_t key = pair_key(a, b);
    for (size_t i = pair_home(m, key);; i = (i + 1) & m->mask) {
        const nx_tok_pairslot *e = &m->slots[i];
        if (e->key == key) return e;
        if (e->key == UINT64_MAX) return NULL;
    }
}

/* ---- the merge loop ------------------------------------------------------------ */

static inline void pair_rank(const nx_tok_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *nid) {
    const nx_tok_pairslot *p = pair_get(m, a, b);
    *rank = p ? p->rank : INT32_MAX;
    *nid = p ? p->new_id : -1;
}

/* The rule itself, O(n^2): rank[i] is the rank of pair (sym[i], sym[i+1]);
 * merge the lowest, leftmost first; close the gap. Used up to
 * NX_TOK_SMALL_WORD symbols, where it beats the heap. */
static int merge_scan(const nx_tok_pairmap *m, int32_t *sym, int n, int32_t *rank, int32_t *nid) {
    for (int i = 0; i + 1 < n; i++) pair_rank(m, sym[i], sym[i + 1], &rank[i], &nid[i]);
    while (n > 1) {
        int best = -1;
        int32_t br = INT32_MAX;
        for (int i = 0; i + 1 < n; i++)
            if (rank[i] < br) br = rank[i], best = i;
        if (best < 0) break;
        sym[best] = nid[best];
        int tail = n - best - 2;   /* symbols after the absorbed one */
        if (tail > 0) {
            memmove(sym + best + 1, sym + best + 2, (size_t)tail * sizeof *sym);
            memmove(rank + best + 1, rank + best + 2, (size_t)(tail - 1) * sizeof *rank);
            memmove(nid + best + 1, nid + best + 2, (size_t)(tail - 1) * sizeof *nid);
        }
        n--;
        if (best + 1 < n) pair_rank(m, sym[best], sym[best + 1], &rank[best], &nid[best]);
        if (best > 0) pair_rank(m, sym[best - 1], sym[best], &rank[best - 1], &nid[best - 1]);
    }
    return n;
}

/* A heap entry: key = rank << 32 | position, so one compare orders (rank,
 * pos); stamp is stamp[pos] when pushed (see nx_tok_merge_heap). */
typedef struct {
    uint64_t key;
    int32_t new_id;
    uint32_t stamp;
} heap_ent;

/* A 4-ary min-heap: half the levels of a binary one, and the four children
 * share a cache line. */
static inline void heap_push(heap_ent *h, size_t *n, heap_ent e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 4;
        if (h[p].key <= e.key) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static inline heap_ent heap_pop(heap_ent *h, size_t *n) {
    heap_ent top = h[0], last = h[--*n];
    size_t i = 0, m = *n;
    if (m == 0) return top;
    for (;;) {
        size_t c = 4 * i + 1, best = c;
        if (c >= m) break;
        size_t end = c + 4 < m ? c + 4 : m;
        for (size_t j = c + 1; j < end; j++)
            if (h[j].key < h[best].key) best = j;
        if (last.key <= h[best].key) break;
        h[i] = h[best];
        i = best;
    }
    h[i] = last;
    return top;
}

static inline void push_pair(const nx_tok_pairmap *m, heap_ent *heap, size_t *hn, const int32_t *sym,
                             const uint32_t *stamp, int left, int right) {
    const nx_tok_pairslot *p = pair_get(m, sym[left], sym[right]);
    if (p) heap_push(heap, hn, (heap_ent){(uint64_t)p->rank << 32 | (uint32_t)left, p->new_id, stamp[left]});
}

int nx_tok_merge_scan(const nx_tokenizer *t, int32_t *sym, int n, int32_t *rank, int32_t *nid) {
    return merge_scan(&t->merges, sym, n, rank, nid);
}

/* HF's Word::merge_all: a doubly linked list over sym[], merged symbols marked
 * -1; w's scratch must hold n symbols (nx_tok_reserve_symbols). HF re-checks
 * every popped entry with a merge-table lookup; we first compare stamp[pos],
 * bumped whenever the pair starting at pos changes: an unchanged stamp means
 * an unchanged pair (HF's check passes), and only a changed one pays for the
 * lookup, which then decides exactly as HF does. */
int nx_tok_merge_heap(const nx_tokenizer *t, nx_tok_work *w, int32_t *sym, int n) {
    const nx_tok_pairmap *m = &t->merges;
    int32_t *prev = w->prev, *next = w->next;
    uint32_t *stamp = w->stamp;
    heap_ent *heap = w->heap;
    size_t hn = 0;
    for (int i = 0; i < n; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
        stamp[i] = 0;
    }
    for (int i = 0; i + 1 < n; i++) push_pair(m, heap, &hn, sym, stamp, i, i + 1);
    while (hn > 0) {
        heap_ent top = heap_pop(heap, &hn);
        int pos = (int)(uint32_t)top.key;
        if (sym[pos] < 0) continue;                       /* absorbed into its left */
        int nx = next[pos];
        if (nx < 0) continue;                             /* the last symbol */
        if (top.stamp != stamp[pos]) {                    /* the pair changed: HF's check */
            const nx_tok_pairslot *p = pair_get(m, sym[pos], sym[nx]);
            if (!p || p->new_id != top.new_id) continue;
        }
        sym[pos] = top.new_id;
        sym[nx] = -1;
        int nn = next[nx], pp = prev[pos];
        next[pos] = nn;
        if (nn >= 0) prev[nn] = pos;
        stamp[pos]++;
        if (pp >= 0) {
            stamp[pp]++;
            push_pair(m, heap, &hn, sym, stamp, pp, pos);
        }
        if (nn >= 0) push_pair(m, heap, &hn, sym, stamp, pos, nn);
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (sym[i] >= 0) sym[k++] = sym[i];
    return k;
}

/* ---- long words: rank levels ------------------------------------------------------ */

/* Suppose no merge of rank r ever creates a pair of rank <= r (true when every
 * merge that uses a token ranks after the merge that made it, which is how
 * BPE training writes the list). Then HF's heap order is simply: rank levels
 * in increasing order, each level's positions left to right, and a level
 * gains no entries once it is the lowest. So each distinct rank gets a bucket
 * of positions, a small heap orders the buckets, and a level's positions are
 * sorted once (they arrive as a few increasing runs). Pops are O(1) instead
 * of O(log n). If a merge does create a pair of rank <= r we give up and the
 * caller runs the heap on the original word: same answer, just slower. */

typedef struct {
    int32_t rank, a, b, new_id;    /* the one pair of this rank */
    int32_t head, tail, last;      /* entry list; last position appended */
    int32_t sorted, done;
} merge_bucket;

static inline uint32_t rank_home(int32_t rank, size_t cap) {
    return (uint32_t)(((uint64_t)(uint32_t)rank * 0x9E3779B97F4A7C15ull) >> 32) & (uint32_t)(cap - 1);
}

static int bslot_grow(nx_tok_work *w, size_t nb) {
    size_t cap = w->cap_bslot ? w->cap_bslot : 64;
    while (cap < 2 * nb) cap *= 2;
    if (cap != w->cap_bslot) {
        int32_t *p = nx_alloc(cap * sizeof *p);
        if (!p) return -1;
        nx_free(w->bslot);
        w->bslot = p;
        w->cap_bslot = cap;
    }
    memset(w->bslot, 0xFF, w->cap_bslot * sizeof *w->bslot);   /* all -1 */
    const merge_bucket *bk = w->bk;
    for (size_t i = 0; i < nb; i++) {
        uint32_t j = rank_home(bk[i].rank, w->cap_bslot);
        while (w->bslot[j] >= 0) j = (j + 1) & (uint32_t)(w->cap_bslot - 1);
        w->bslot[j] = (int32_t)i;
    }
    return 0;
}

static inline void rheap_push(int32_t *h, int32_t *n, const merge_bucket *bk, int32_t b) {
    int32_t i = (*n)++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (bk[h[p]].rank <= bk[b].rank) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = b;
}

static inline int32_t rheap_pop(int32_t *h, int32_t *n, const merge_bucket *bk) {
    int32_t top = h[0], last = h[--*n], i = 0, m = *n;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && bk[h[c + 1]].rank < bk[h[c]].rank) c++;
        if (bk[last].rank <= bk[h[c]].rank) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

typedef struct {
    nx_tok_work *w;
    int32_t *pool;                 /* entry e: pool[2e] = position, pool[2e+1] = next entry */
    int32_t n_ent, n_bk, n_rheap;
} level_state;

/* Queues position pos (pair a, b merging per p) in its rank's bucket.
 * -1: the bucket's level is already done, or no memory. */
static int level_add(level_state *L, const nx_tok_pairslot *p, int32_t a, int32_t b, int32_t pos) {
    nx_tok_work *w = L->w;
    uint32_t mask = (uint32_t)w->cap_bslot - 1, j = rank_home(p->rank, w->cap_bslot);
    merge_bucket *bk = w->bk;
    int32_t bi;
    while ((bi = w->bslot[j]) >= 0 && bk[bi].rank != p->rank) j = (j + 1) & mask;
    if (bi < 0) {
        if ((size_t)L->n_bk == w->cap_bk) {
            size_t cap = w->cap_bk ? 2 * w->cap_bk : 64;
            merge_bucket *nb = nx_realloc(w->bk, cap * sizeof *nb);
            if (!nb) return -1;
            w->bk = bk = nb;
            int32_t *rh = nx_realloc(w->rheap, cap * sizeof *rh);
            if (!rh) return -1;
            w->rheap = rh;
            w->cap_bk = cap;
        }
        bi = L->n_bk++;
        bk[bi] = (merge_bucket){p->rank, a, b, p->new_id, -1, -1, -1, 1, 0};
        if ((size_t)L->n_bk * 2 > w->cap_bslot) {
            if (bslot_grow(w, (size_t)L->n_bk) != 0) return -1;
        } else {
            w->bslot[j] = bi;
        }
        rheap_push(w->rheap, &L->n_rheap, bk, bi);
    }
    merge_bucket *B = &bk[bi];
    if (B->done) return -1;
    int32_t e = L->n_ent++;
    L->pool[2 * e] = pos;
    L->pool[2 * e + 1] = -1;
    if (B->tail >= 0) L->pool[2 * B->tail + 1] = e;
    else B->head = e;
    B->tail = e;
    if (pos < B->last) B->sorted = 0;
    B->last = pos;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static inline int level_pair(level_state *L, const nx_tok_pairmap *m, const int32_t *sym, int left, int right,
                             int32_t rank) {
    const nx_tok_pairslot *p = pair_get(m, sym[left], sym[right]);
    if (!p) return 0;
    if (p->rank <= rank) return -1;   /* not monotone here: let the heap decide */
    return level_add(L, p, sym[left], sym[right], left);
}

int nx_tok_merge_buckets(const nx_tokenizer *t, nx_tok_work *w, int32_t *sym, int n) {
    const nx_tok_pairmap *m = &t->merges;
    int32_t *prev = w->prev, *next = w->next, *pos_list = w->aux;
    level_state L = {w, (int32_t *)w->heap, 0, 0, 0};   /* <= 3n entries fit the heap's room */
    if (bslot_grow(w, 0) != 0) return -1;
    for (int i = 0; i < n; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    for (int i = 0; i + 1 < n; i++)
        if (level_pair(&L, m, sym, i, i + 1, -1) != 0) return -1;
    while (L.n_rheap > 0) {
        merge_bucket *B = &((merge_bucket *)w->bk)[rheap_pop(w->rheap, &L.n_rheap, w->bk)];
        int32_t cnt = 0, rank = B->rank, a = B->a, b = B->b, new_id = B->new_id;
        for (int32_t e = B->head; e >= 0; e = L.pool[2 * e + 1]) pos_list[cnt++] = L.pool[2 * e];
        if (!B->sorted) qsort(pos_list, (size_t)cnt, sizeof *pos_list, cmp_i32);
        B->done = 1;
        for (int32_t k = 0; k < cnt; k++) {
            int pos = pos_list[k];
            if (sym[pos] < 0) continue;
            int nx = next[pos];
            if (nx < 0) continue;
            if (sym[pos] != a || sym[nx] != b) {   /* changed: HF's check decides */
                const nx_tok_pairslot *p = pair_get(m, sym[pos], sym[nx]);
                if (!p || p->new_id != new_id) continue;
            }
            sym[pos] = new_id;
            sym[nx] = -1;
            int nn = next[nx], pp = prev[pos];
            next[pos] = nn;
            if (nn >= 0) prev[nn] = pos;
            /* level_add may move the bucket array: B is not used below */
            if (pp >= 0 && level_pair(&L, m, sym, pp, pos, rank) != 0) return -1;
            if (nn >= 0 && level_pair(&L, m, sym, pos, nn, rank) != 0) return -1;
        }
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (sym[i] >= 0) sym[k++] = sym[i];
    return k;
}

/* One symbol per byte (ByteLevel maps each byte to one char). The general path
 * is HF's BPE::merge_word: a char missing from the vocab becomes its
 * byte_fallback tokens, else unk (fused if fuse_unk), else nothing. HF does
 * not flush a pending unk before byte-fallback tokens; neither do we. */
static int initial_symbols(const nx_tokenizer *t, const uint8_t *s, size_t n, int32_t *sym) {
    if (t->bytes_direct) {
        for (size_t i = 0; i < n; i++) sym[i] = t->byte_sym[s[i]];
        return (int)n;
    }
    int k = 0, pending_unk = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = s[i];
        if (t->byte_sym[b] >= 0) {
            if (pending_unk) sym[k++] = t->unk_id, pending_unk = 0;
            sym[k++] = t->byte_sym[b];
        } else if (t->byte_fallback && t->byte_fb_n[b]) {
            for (int j = 0; j < t->byte_fb_n[b]; j++) sym[k++] = t->byte_fb[b][j];
        } else if (t->unk_id >= 0) {
            if (pending_unk && !t->fuse_unk) sym[k++] = t->unk_id;
            pending_unk = 1;
        }
    }
    if (pending_unk) sym[k++] = t->unk_id;
    return k;
}

/* ---- the piece cache ------------------------------------------------------------ */

_Static_assert((NX_TOK_CACHE_SHARDS & (NX_TOK_CACHE_SHARDS - 1)) == 0, "shards: a power of two");
_Static_assert((NX_TOK_CACHE_SLOTS & (NX_TOK_CACHE_SLOTS - 1)) == 0, "slots: a power of two");

struct nx_tok_centry {
    uint64_t hash;
    uint32_t klen, nids;
    int32_t ids[];                 /* then klen key bytes */
};

static inline const char *centry_key(const nx_tok_centry *e) { return (const char *)(e->ids + e->nids); }
static inline nx_tok_cshard *shard_of(nx_tokenizer *t, uint64_t h) {
    return &t->cache[(h >> 48) & (NX_TOK_CACHE_SHARDS - 1)];
}

void nx_tok_cache_init(nx_tokenizer *t) {
    for (int s = 0; s < NX_TOK_CACHE_SHARDS; s++) {
        pthread_mutex_init(&t->cache[s].mu, NULL);
        memset(t->cache[s].slot, 0, sizeof t->cache[s].slot);
    }
}

void nx_tok_cache_free(nx_tokenizer *t) {
    for (int s = 0; s < NX_TOK_CACHE_SHARDS; s++) {
        for (int i = 0; i < NX_TOK_CACHE_SLOTS; i++) nx_free(t->cache[s].slot[i]);
        pthread_mutex_destroy(&t->cache[s].mu);
    }
}

/* The caller reserved room for the ids (a piece of n bytes has at most 2n). */
static int cache_get(nx_tokenizer *t, nx_tok_work *w, uint64_t h, const char *s, size_t n) {
    nx_tok_cshard *sh = shard_of(t, h);
    pthread_mutex_lock(&sh->mu);
    const nx_tok_centry *e = sh->slot[h & (NX_TOK_CACHE_SLOTS - 1)];
    int hit = e && e->hash == h && e->klen == n && memcmp(centry_key(e), s, n) == 0;
    if (hit) {
        memcpy(w->ids + w->n_ids, e->ids, e->nids * sizeof *e->ids);
        w->n_ids += e->nids;
    }
    pthread_mutex_unlock(&sh->mu);
    return hit;
}

/* Best effort: without memory the piece is simply not cached. */
static void cache_put(nx_tokenizer *t, uint64_t h, const char *s, size_t n, const int32_t *ids, int nids) {
    nx_tok_centry *e = nx_alloc(sizeof *e + (size_t)nids * sizeof *ids + n);
    if (!e) return;
    e->hash = h;
    e->klen = (uint32_t)n;
    e->nids = (uint32_t)nids;
    memcpy(e->ids, ids, (size_t)nids * sizeof *ids);
    memcpy((char *)(e->ids + nids), s, n);
    nx_tok_cshard *sh = shard_of(t, h);
    pthread_mutex_lock(&sh->mu);
    nx_tok_centry **slot = &sh->slot[h & (NX_TOK_CACHE_SLOTS - 1)];
    nx_tok_centry *old = *slot;
    *slot = e;
    pthread_mutex_unlock(&sh->mu);
    nx_free(old);
}

/* ---- one piece ----------------------------------------------------------------- */

static int reserve_ids(nx_tok_work *w, size_t more) {
    if (w->n_ids + more <= w->cap_ids) return 0;
    size_t cap = w->cap_ids ? w->cap_ids : 64;
    while (cap < w->n_ids + more) cap *= 2;
    int32_t *p = nx_realloc(w->ids, cap * sizeof *p);
    if (!p) return -1;
    w->ids = p;
    w->cap_ids = cap;
    return 0;
}

void nx_tok_work_free(nx_tok_work *w) {
    pcre2_match_data_free(w->md);
    nx_free(w->ids);
    nx_free(w->sym);
    nx_free(w->prev);
    nx_free(w->next);
    nx_free(w->stamp);
    nx_free(w->heap);
    nx_free(w->aux);
    nx_free(w->bk);
    nx_free(w->rheap);
    nx_free(w->bslot);
    nx_free(w->map);
    nx_free(w->nfc);
    memset(w, 0, sizeof *w);
}

int nx_tok_push_id(nx_tok_work *w, int32_t id) {
    if (w->n_ids == w->cap_ids && reserve_ids(w, 1) != 0) return -1;
    w->ids[w->n_ids++] = id;
    return 0;
}

int nx_tok_reserve_symbols(nx_tok_work *w, size_t n) {
    if (n <= w->cap_sym) return 0;
    size_t cap = w->cap_sym ? w->cap_sym : 256;
    while (cap < n) cap *= 2;
    nx_free(w->sym);
    nx_free(w->prev);
    nx_free(w->next);
    nx_free(w->stamp);
    nx_free(w->heap);
    nx_free(w->aux);
    w->sym = nx_alloc(cap * sizeof *w->sym);
    w->prev = nx_alloc(cap * sizeof *w->prev);
    w->next = nx_alloc(cap * sizeof *w->next);
    w->stamp = nx_alloc(cap * sizeof *w->stamp);
    w->heap = nx_alloc(3 * cap * sizeof(heap_ent));   /* n - 1 pairs + 2 per merge */
    w->aux = nx_alloc(2 * cap * sizeof *w->aux);
    w->cap_sym = cap;
    if (w->sym && w->prev && w->next && w->stamp && w->heap && w->aux) return 0;
    w->cap_sym = 0;
    return -1;
}

nx_status nx_tok_bpe_piece(nx_tokenizer *t, nx_tok_work *w, const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    if (n == 0) return NX_OK;
    if (n > (size_t)INT32_MAX / 4) return NX_ERANGE;
    if (n == 1 && t->bytes_direct) return nx_tok_push_id(w, t->byte_sym[u[0]]) ? NX_ENOMEM : NX_OK;
    if (reserve_ids(w, 2 * n) != 0) return NX_ENOMEM;
    if (t->ignore_merges) {   /* HF: a piece that is a whole vocab token is taken as is */
        if (w->cap_map < 2 * n) {
            nx_free(w->map);
            w->cap_map = 0;
            if (!(w->map = nx_alloc(2 * n))) return NX_ENOMEM;
            w->cap_map = 2 * n;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            memcpy(w->map + k, t->byte_utf8[u[i]], t->byte_utf8_len[u[i]]);
            k += t->byte_utf8_len[u[i]];
        }
        int32_t id = nx_tok_strmap_get(&t->vocab, t->vocab_text, w->map, k);
        if (id >= 0) {
            w->ids[w->n_ids++] = id;
            return NX_OK;
        }
    }
    int cacheable = n <= NX_TOK_CACHE_MAX_BYTES;
    uint64_t h = 0;
    if (cacheable) {
        h = nx_tok_hash(s, n);
        if (cache_get(t, w, h, s, n)) return NX_OK;
    }
    if (nx_tok_reserve_symbols(w, 2 * n) != 0) return NX_ENOMEM;
    int k = initial_symbols(t, u, n, w->sym);
    if (k <= NX_TOK_SMALL_WORD) {
        int32_t rank[NX_TOK_SMALL_WORD], nid[NX_TOK_SMALL_WORD];
        k = merge_scan(&t->merges, w->sym, k, rank, nid);
    } else {
        int32_t *orig = w->aux + w->cap_sym;
        memcpy(orig, w->sym, (size_t)k * sizeof *orig);
        int kb = nx_tok_merge_buckets(t, w, w->sym, k);
        if (kb < 0) {   /* the exact reference order, from the original symbols */
            memcpy(w->sym, orig, (size_t)k * sizeof *orig);
            kb = nx_tok_merge_heap(t, w, w->sym, k);
        }
        k = kb;
    }
    memcpy(w->ids + w->n_ids, w->sym, (size_t)k * sizeof *w->sym);
    w->n_ids += (size_t)k;
    if (cacheable) cache_put(t, h, s, n, w->sym, k);
    return NX_OK;
}
