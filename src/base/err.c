/* err.c — error message helpers (see err.h). */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

nx_status nx_fail(char *err, size_t errlen, nx_status status, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}

void nx_err_prefix(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    char prefix[512], old[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    snprintf(old, sizeof old, "%s", err);
    snprintf(err, errlen, "%s: %s", prefix, old);
}

void nx_logf(void (*fn)(void *ctx, const char *line), void *ctx, const char *fmt, ...) {
    if (!fn) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fn(ctx, line);
}

const char *nx_status_str(nx_status s) {
    switch (s) {
    case NX_OK: return "ok";
    case NX_EINVAL: return "invalid argument";
    case NX_EIO: return "i/o error";
    case NX_EFORMAT: return "malformed input";
    case NX_EUNSUPPORTED: return "unsupported";
    case NX_ENOMEM: return "out of memory";
    case NX_ESTATE: return "invalid state";
    case NX_ERANGE: return "out of range";
    case NX_EBUSY: return "busy";
    }
    return "unknown status";
}
