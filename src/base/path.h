/* path.h — where a write to a path lands, and whether it can land there.
 *
 * Used to refuse a file the engine will write late (a checkpoint after a
 * generation, the port file once the server listens) before the model
 * loads, and by the write itself, so that the check and the write agree on
 * which file they mean. nx_write_check (nextn.h) is here too. */
#ifndef NX_BASE_PATH_H
#define NX_BASE_PATH_H

#include <limits.h>
#include <stddef.h>
#include "nextn.h"

/* The file that opening `path` for writing creates or replaces: path
 * itself, or, when path is a symbolic link, the file it points to: resolved
 * in full when that exists, else the link's text (taken from the link's own
 * directory when relative), where open(O_CREAT) would make it. Fills
 * target (PATH_MAX bytes). NX_EIO when a link cannot be read, NX_EINVAL
 * when the path is too long; the message names path. */
nx_status nx_path_target(const char *path, char target[PATH_MAX], char *err, size_t errlen);

/* Makes a file beside `target` (target.XXXXXX) and removes it at once:
 * 0 when a file can be made in target's directory, else the errno that
 * said why not. */
int nx_path_probe(const char *target);

#endif
