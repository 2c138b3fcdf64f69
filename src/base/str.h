/* str.h — small string helpers. */
#ifndef NX_BASE_STR_H
#define NX_BASE_STR_H

#include <string.h>

/* 1 if s ends with suffix. */
static inline int nx_ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

#endif
