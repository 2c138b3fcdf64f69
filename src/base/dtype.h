/* dtype.h — element types of stored tensors (safetensors dtype strings). */
#ifndef NX_BASE_DTYPE_H
#define NX_BASE_DTYPE_H

#include <stddef.h>

typedef enum {
    NX_DT_F32 = 0,
    NX_DT_F16,
    NX_DT_BF16,
    NX_DT_F64,
    NX_DT_I64,
    NX_DT_I32,
    NX_DT_U32,   /* MLX packed quantized weights */
    NX_DT_I16,
    NX_DT_U16,
    NX_DT_I8,
    NX_DT_U8,
    NX_DT_BOOL,
    NX_DT_F8_E4M3,
    NX_DT_F8_E5M2,
    NX_DT_COUNT
} nx_dtype;

/* Size of one element in bytes. */
size_t nx_dtype_size(nx_dtype t);
/* The safetensors spelling ("F32", "BF16", ...). */
const char *nx_dtype_name(nx_dtype t);
/* Parses a safetensors dtype string; returns 0 and sets *out, or -1 if unknown. */
int nx_dtype_parse(const char *s, nx_dtype *out);

#endif
