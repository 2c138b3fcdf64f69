/* safetensors.h — read-only, mmap-backed access to safetensors checkpoints,
 * and a writer.
 *
 * File format: an 8-byte little-endian header length N, N bytes of JSON
 * (an object: tensor name -> {"dtype", "shape", "data_offsets": [begin, end]},
 * plus an optional "__metadata__" object of string values), then the data
 * region; offsets are relative to the start of the data region.
 *
 * Reading. st_open_* maps each file read-only and validates the whole header
 * before returning: N fits in the file, the JSON parses and is an object,
 * every entry has a known dtype, a shape of non-negative integers whose
 * element count times the dtype size equals end - begin, 0 <= begin <= end <=
 * data size, and no two tensors' byte ranges overlap (empty tensors are legal
 * and overlap nothing). Any failure is NX_EFORMAT, with three exceptions:
 * NX_EIO when a file cannot be opened or mapped, NX_EUNSUPPORTED for a header
 * over 100 MiB or a tensor of more than ST_MAX_DIMS dimensions, NX_ENOMEM. The
 * message names the file and, where there is one, the tensor. Data pointers
 * always lie inside the mapping; nothing is copied. The data region starts
 * at byte 8 + N, which need not be aligned: pointers are recorded as they
 * fall, and callers that need alignment check it.
 *
 * A set is one checkpoint: one file, or the shards listed by
 * model.safetensors.index.json ("weight_map": name -> file). For a sharded
 * set every name in the weight map must be present in the file it names, and
 * a name may not appear in two shards. Shard names must be plain file names
 * in the same directory (no '/').
 *
 * Ownership: the set owns the mappings, names and st_tensor records; they
 * stay valid until st_close. On failure st_open_* set *out to NULL and leave
 * nothing mapped or allocated. st_close(NULL) and st_writer_free(NULL) are
 * no-ops. */
#ifndef NX_IO_SAFETENSORS_H
#define NX_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"
#include "nextn.h"

#define ST_MAX_DIMS 8

typedef struct {
    const char *name;            /* tensor name                               */
    const char *file;            /* path of the file that holds it            */
    nx_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;               /* product of shape (1 for a 0-d tensor)      */
    const void *data;            /* inside the read-only mapping               */
    size_t nbytes;
} st_tensor;

typedef struct st_set st_set;

/* Opens one .safetensors file as a set. */
nx_status st_open_file(const char *path, st_set **out, char *err, size_t errlen);

/* Opens the checkpoint in directory dir: model.safetensors.index.json if
 * present (its shards in name order), else model.safetensors, else every
 * *.safetensors file in the directory (sorted by name with strcmp; a tensor
 * name in two of them is an error). No file at all is NX_EIO naming the
 * directory. */
nx_status st_open_dir(const char *dir, st_set **out, char *err, size_t errlen);

void st_close(st_set *s);

const st_tensor *st_find(const st_set *s, const char *name);   /* NULL if absent */

/* A hint that bytes [p, p + n) of the set's mappings will not be read again
 * soon: the whole pages inside the range leave the process's resident set
 * (the mappings are private and read-only, so a later read faults the same
 * bytes back in from the file). Parts outside every mapping are ignored, so
 * p may point anywhere. Changes no byte. */
void st_release(const st_set *s, const void *p, size_t n);
int st_count(const st_set *s);
/* 0 <= i < st_count, else NULL. File order: files in st_file_path order, and
 * within a file by data offset (empty tensors first at a tie, then by name). */
const st_tensor *st_at(const st_set *s, int i);
int st_file_count(const st_set *s);
const char *st_file_path(const st_set *s, int i);
/* Value of a "__metadata__" key in the file holding tensor 0 (or the only
 * file), or NULL. */
const char *st_metadata(const st_set *s, const char *key);

/* ---- Writing ----------------------------------------------------------- */

/* Collects tensors, then writes a file with "__metadata__" first and the
 * tensors back to back (the format allows no gaps): those whose size is a
 * multiple of 64 bytes first, then of 32, 16 ... 1, otherwise in insertion
 * order. The header is padded with spaces so that the data region starts at
 * a file offset (8 + N) that is a multiple of 64: a mapped tensor whose size
 * is a multiple of 64 starts 64-byte aligned, every tensor at a multiple of
 * its element size. The writer copies the tensor data it is
 * given (st_writer_add may be followed by freeing the caller's buffer), so it
 * holds the whole file in memory until st_writer_free. Writing goes to
 * "<path>.tmp" and is renamed into place, so a failed write never leaves a
 * half file under the final name.
 *
 * Errors: NX_EINVAL for a bad argument (empty or reserved "__metadata__" name,
 * a name added twice, a shape whose size is not nbytes, a name that is not
 * UTF-8), NX_ENOMEM, NX_EIO for the file. st_writer_meta replaces the value of
 * a key set before. */
typedef struct st_writer st_writer;

nx_status st_writer_new(st_writer **out, char *err, size_t errlen);
void st_writer_free(st_writer *w);
nx_status st_writer_meta(st_writer *w, const char *key, const char *value, char *err, size_t errlen);
nx_status st_writer_add(st_writer *w, const char *name, nx_dtype dtype, int ndim,
                        const int64_t *shape, const void *data, size_t nbytes,
                        char *err, size_t errlen);
nx_status st_writer_write(const st_writer *w, const char *path, char *err, size_t errlen);
/* Bytes of tensor data added so far (used to split shards). */
size_t st_writer_bytes(const st_writer *w);

#endif
