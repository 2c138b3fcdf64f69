/* dtype.c — the safetensors dtype table. */
#include "base/dtype.h"

#include <string.h>

static const struct { const char *name; size_t size; } dtype_table[NX_DT_COUNT] = {
    [NX_DT_F32] = {"F32", 4},   [NX_DT_F16] = {"F16", 2},   [NX_DT_BF16] = {"BF16", 2},
    [NX_DT_F64] = {"F64", 8},   [NX_DT_I64] = {"I64", 8},   [NX_DT_I32] = {"I32", 4},
    [NX_DT_U32] = {"U32", 4},   [NX_DT_I16] = {"I16", 2},   [NX_DT_U16] = {"U16", 2},
    [NX_DT_I8] = {"I8", 1},     [NX_DT_U8] = {"U8", 1},     [NX_DT_BOOL] = {"BOOL", 1},
    [NX_DT_F8_E4M3] = {"F8_E4M3", 1}, [NX_DT_F8_E5M2] = {"F8_E5M2", 1},
};

size_t nx_dtype_size(nx_dtype t) { return (unsigned)t < NX_DT_COUNT ? dtype_table[t].size : 0; }

const char *nx_dtype_name(nx_dtype t) { return (unsigned)t < NX_DT_COUNT ? dtype_table[t].name : "?"; }

int nx_dtype_parse(const char *s, nx_dtype *out) {
    for (int i = 0; i < NX_DT_COUNT; i++)
        if (strcmp(s, dtype_table[i].name) == 0) { *out = (nx_dtype)i; return 0; }
    return -1;
}
