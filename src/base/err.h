/* err.h — status codes and error messages.
 *
 * Every library call that can fail returns an nx_status (defined in the public
 * header) and, on failure, writes one line into a caller-supplied buffer
 * `char *err, size_t errlen` that names the file, tensor, field or argument at
 * fault. Only main() turns an error into an exit code. */
#ifndef NX_BASE_ERR_H
#define NX_BASE_ERR_H

#include <stddef.h>
#include "nextn.h"

/* Formats a message into err (truncating to errlen, always NUL-terminated;
 * err may be NULL or errlen 0) and returns `status`, so callers can write
 *     return nx_fail(err, errlen, NX_EFORMAT, "%s: bad header", path);  */
nx_status nx_fail(char *err, size_t errlen, nx_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prepends "prefix: " to the message already in err (used to add context,
 * e.g. the checkpoint directory, as an error travels up). */
void nx_err_prefix(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Formats one line and hands it to fn(ctx, line), a caller's log sink; a
 * no-op when fn is NULL. Lines longer than 1 KB are cut. */
void nx_logf(void (*fn)(void *ctx, const char *line), void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
