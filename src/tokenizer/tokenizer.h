/* tokenizer.h — internals of the byte-level BPE tokenizer (not API; see nextn.h).
 *
 * nx_tokenize follows Hugging Face `tokenizers` (0.22) step by step:
 *
 *   text ──added tokens with normalized:false (raw text)──> segments | added ids
 *   segment ──NFC──> ──added tokens with normalized:true──> segments | added ids
 *   segment ──Split regex stages (Isolated), in file order──> pieces
 *   piece ──ByteLevel: one initial symbol per byte──> ──BPE merges──> ids
 *
 * Files, in that order of the work:
 *   tokenizer.c  loading tokenizer.json / tokenizer_config.json, lookups, nx_tokenize
 *   pretok.c     UTF-8 checks, NFC, added-token matching, the regex split
 *   bpe.c        string and pair hash tables, the merge loops, the piece cache
 *   decode.c     ids -> bytes -> UTF-8 (U+FFFD as HF), streaming decode
 *
 * Invariants:
 *   1. Everything but `cache` is written only by nx_tokenizer_load, so any
 *      number of threads may encode and decode at once.
 *   2. The cache maps a piece's raw bytes to the ids BPE gives it. An entry is
 *      read and written only under its shard's mutex; a miss is always safe
 *      (the piece is merged again), so eviction is plain overwrite.
 *   3. Ids are in [0, vocab_size); ids nobody defines have flags == 0.
 */
#ifndef NX_TOKENIZER_TOKENIZER_H
#define NX_TOKENIZER_TOKENIZER_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "nextn.h"

enum {
    NX_TOK_MAX_STAGES = 4,         /* regex split stages (Split..., ByteLevel use_regex) */
    NX_TOK_MAX_ID = 1 << 24,       /* ids at or above are a format error (16M >> any vocab) */
    NX_TOK_CACHE_SHARDS = 16,      /* independent mutexes: threads rarely meet          */
    NX_TOK_CACHE_SLOTS = 2048,     /* per shard, direct mapped: 32768 pieces in all     */
    NX_TOK_CACHE_MAX_BYTES = 96,   /* longer pieces are rare; merging them is not cached */
    NX_TOK_SMALL_WORD = 96         /* up to this many symbols the O(n^2) scan is fastest */
};

/* Per-id flags. */
enum { NX_TOK_DEFINED = 1, NX_TOK_ADDED = 2, NX_TOK_SPECIAL = 4 };

/* ---- bpe.c: hash tables, merge loop, cache -------------------------------- */

uint64_t nx_tok_hash(const void *data, size_t n);

/* String -> id, open addressing. Keys live in an arena the caller passes to
 * every call (the arena may move while loading; offsets do not). */
typedef struct {
    uint32_t hash, off, len;
    int32_t id;                    /* -1: empty slot */
} nx_tok_strslot;
typedef struct {
    nx_tok_strslot *slots;
    uint32_t mask, count;
} nx_tok_strmap;

int nx_tok_strmap_init(nx_tok_strmap *m, size_t expected);    /* 0, or -1: no memory */
void nx_tok_strmap_free(nx_tok_strmap *m);
int32_t nx_tok_strmap_get(const nx_tok_strmap *m, const char *arena, const char *s, size_t n);
/* Inserts or overwrites (the later entry wins, as in a JSON object). 0 or -1. */
int nx_tok_strmap_put(nx_tok_strmap *m, const char *arena, uint32_t off, uint32_t len, int32_t id);

/* (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t key;                  /* left << 32 | right; UINT64_MAX: empty */
    int32_t rank, new_id;
} nx_tok_pairslot;
typedef struct {
    nx_tok_pairslot *slots;
    uint64_t mask;
    int shift;
} nx_tok_pairmap;

int nx_tok_pairmap_init(nx_tok_pairmap *m, size_t expected);
void nx_tok_pairmap_free(nx_tok_pairmap *m);
void nx_tok_pairmap_put(nx_tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t new_id);

typedef struct nx_tok_centry nx_tok_centry;
typedef struct {
    pthread_mutex_t mu;
    nx_tok_centry *slot[NX_TOK_CACHE_SLOTS];
} nx_tok_cshard;

/* ---- the tokenizer ---------------------------------------------------------- */

typedef struct {
    uint32_t off, len;             /* content, in added_text                     */
    char *pattern;                 /* what is matched: content, or NFC(content)   */
    size_t plen;
    int32_t id;
    uint8_t special, lstrip, rstrip, normalized, single_word;
} nx_tok_added;

/* Leftmost-longest matching over a set of added tokens (HF uses Aho-Corasick
 * with MatchKind::LeftmostLongest; with a few dozen tokens a first-byte index
 * is as fast). */
typedef struct {
    int n;
    int *order;                    /* added-token indices by first byte, longest first */
    int start[257];                /* order[start[b] .. start[b+1]) begin with byte b  */
} nx_tok_matcher;

struct nx_tokenizer {
    /* configuration: written once by nx_tokenizer_load */
    char *path;                    /* dir/tokenizer.json, for messages            */
    int vocab_size;                /* largest id + 1, added tokens included       */

    char *vocab_text;              /* model token strings (byte-level form)       */
    size_t vocab_text_len, vocab_text_cap;
    nx_tok_strmap vocab;           /* model.vocab: string -> id                   */
    uint32_t *id_off, *id_len;     /* [vocab_size] model string of id; len UINT32_MAX: none */
    nx_tok_pairmap merges;
    int n_merges;
    int32_t unk_id;                /* -1: no unk_token                             */
    int fuse_unk, byte_fallback, ignore_merges;

    uint32_t byte_char[256];       /* GPT-2 byte -> code point                     */
    char byte_utf8[256][3];        /* that code point as UTF-8 ...                 */
    uint8_t byte_utf8_len[256];    /* ... and its length (1 or 2)                  */
    int32_t byte_sym[256];         /* vocab id of byte b's char, -1: none          */
    int32_t byte_fb[256][2];       /* byte_fallback ids "<0xXX>" of that char       */
    uint8_t byte_fb_n[256];        /* 0: no fallback                               */
    int bytes_direct;              /* all 256 byte_sym >= 0: symbols are byte_sym[] */

    char *added_text;
    nx_tok_added *added;
    int n_added;
    nx_tok_strmap added_map;       /* content -> id, over added_text               */
    nx_tok_matcher match_raw;      /* normalized: false — matched on the raw text  */
    nx_tok_matcher match_norm;     /* normalized: true — matched after NFC         */
    pcre2_code *word_re;           /* \w of Rust's regex, only if a single_word token */

    int nfc;                       /* normalizer is NFC                            */
    pcre2_code *stage[NX_TOK_MAX_STAGES];
    int stage_jit[NX_TOK_MAX_STAGES];
    int n_stages;
    pcre2_general_context *gctx;   /* routes PCRE2's memory through base/alloc     */

    uint8_t *id_flags;             /* [vocab_size] NX_TOK_*                        */
    char *dec_bytes;               /* bytes each id decodes to                    */
    uint32_t *dec_off, *dec_len;   /* [vocab_size]                                 */
    size_t max_dec_len;

    int32_t stop[4];
    int n_stop;
    char *chat_template;

    /* state: the only thing encoding writes (invariant 2) */
    nx_tok_cshard cache[NX_TOK_CACHE_SHARDS];
};

/* Scratch for one nx_tokenize call (one thread). */
typedef struct {
    int32_t *ids;                  /* output */
    size_t n_ids, cap_ids;
    int32_t *sym;                  /* BPE symbols of one piece, and the linked list */
    int32_t *prev, *next;
    uint32_t *stamp;
    void *heap;                    /* heap entries, or the bucket entry pool */
    int32_t *aux;                  /* [2 * cap_sym]: a level's positions, the original word */
    size_t cap_sym;
    void *bk;                      /* rank buckets (bpe.c) */
    int32_t *rheap;                /* bucket ids ordered by rank */
    size_t cap_bk;
    int32_t *bslot;                /* rank -> bucket, open addressing */
    size_t cap_bslot;
    char *map;                     /* a piece in byte-level form (ignore_merges)    */
    size_t cap_map;
    int32_t *nfc;                  /* NFC's UTF-32 buffer, re-encoded in place      */
    size_t cap_nfc;
    pcre2_match_data *md;
    nx_special_mode mode;
    char *err;                     /* the caller's message buffer */
    size_t errlen;
    /* tests: receive the pre-token pieces instead of running BPE on them */
    void (*piece_fn)(void *ud, const char *s, size_t n);
    void *piece_ud;
} nx_tok_work;

int nx_tok_push_id(nx_tok_work *w, int32_t id);   /* 0, or -1: no memory */

/* The two merge loops (see bpe.c); both return the new symbol count. The
 * scan needs rank/nid scratch of n entries; the heap uses w's scratch. Tests
 * check that they agree. */
int nx_tok_merge_scan(const nx_tokenizer *t, int32_t *sym, int n, int32_t *rank, int32_t *nid);
int nx_tok_merge_heap(const nx_tokenizer *t, nx_tok_work *w, int32_t *sym, int n);
/* The fast path for long words; -1 when it cannot decide (the merge list is
 * not rank-monotone here, or memory ran out): sym is then garbage. */
int nx_tok_merge_buckets(const nx_tokenizer *t, nx_tok_work *w, int32_t *sym, int n);
int nx_tok_reserve_symbols(nx_tok_work *w, size_t n);
void nx_tok_work_free(nx_tok_work *w);

/* Appends the ids of one pre-token piece (raw bytes) to w->ids. */
nx_status nx_tok_bpe_piece(nx_tokenizer *t, nx_tok_work *w, const char *s, size_t n);
void nx_tok_cache_init(nx_tokenizer *t);
void nx_tok_cache_free(nx_tokenizer *t);

/* ---- pretok.c ----------------------------------------------------------------- */

/* Length of the UTF-8 unit at s[0..n) (n >= 1): a valid character (*cp set),
 * or the maximal invalid subpart (*cp = UINT32_MAX; *truncated = 1 when the
 * subpart is a valid prefix cut short by the end of the input). */
size_t nx_tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp, int *truncated);
/* Offset of the first byte that is not valid UTF-8, or n. */
size_t nx_tok_utf8_check(const uint8_t *s, size_t n);
/* 1 if cp is in a block that is NFC-stable in any context (pretok.c). */
int nx_tok_nfc_stable(uint32_t cp);
/* NFC of s[0..n) into w's buffer (s itself when nothing can change). */
nx_status nx_tok_nfc(nx_tok_work *w, const char *s, size_t n, const char **out, size_t *out_n);

nx_status nx_tok_matcher_build(nx_tok_matcher *m, const nx_tokenizer *t, int normalized);
void nx_tok_matcher_free(nx_tok_matcher *m);

/* Rewrites a pattern from tokenizer.json (Oniguruma syntax) for PCRE2 and
 * compiles it; NULL with *oom set when memory ran out, else with msg. */
pcre2_code *nx_tok_regex_compile(const nx_tokenizer *t, const char *pattern, size_t len, int literal, int *oom,
                                 char *msg, size_t msglen);

/* The whole pipeline after the input was checked to be UTF-8. */
nx_status nx_tok_encode(nx_tokenizer *t, nx_tok_work *w, const char *text, size_t len);
/* Tests: the pieces BPE would see for text (NFC and the regex stages, no
 * added-token matching), each passed to fn. */
nx_status nx_tok_pieces(nx_tokenizer *t, const char *text, size_t len, void (*fn)(void *ud, const char *s, size_t n),
                        void *ud, char *err, size_t errlen);

/* ---- decode.c ----------------------------------------------------------------- */

/* Fills dec_bytes/dec_off/dec_len/max_dec_len from the token strings. 0 or -1. */
int nx_tok_build_decode(nx_tokenizer *t);
/* Replaces invalid UTF-8 in in[0..n) by U+FFFD (maximal subparts, as Rust's
 * String::from_utf8_lossy) into out (room for 3*n bytes). With held != NULL an
 * incomplete sequence at the end is not consumed: *held gets its length. */
size_t nx_tok_utf8_lossy(const uint8_t *in, size_t n, char *out, size_t *held);

#endif
