/* path.c — see path.h. */
#include "base/path.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"

nx_status nx_path_target(const char *path, char target[PATH_MAX], char *err, size_t errlen) {
    struct stat sb;
    if (lstat(path, &sb) != 0 || !S_ISLNK(sb.st_mode)) {
        if (snprintf(target, PATH_MAX, "%s", path) >= PATH_MAX)
            return nx_fail(err, errlen, NX_EINVAL, "%s: the path is too long", path);
        return NX_OK;
    }
    if (realpath(path, target)) return NX_OK;
    /* a link to nowhere (yet): its text, from the link's directory */
    char link[PATH_MAX];
    const ssize_t n = readlink(path, link, sizeof link - 1);
    const char *slash = strrchr(path, '/');
    const int dir = slash && n > 0 && link[0] != '/' ? (int)(slash - path + 1) : 0;
    if (n <= 0 || snprintf(target, PATH_MAX, "%.*s%.*s", dir, path, (int)n, link) >= PATH_MAX)
        return nx_fail(err, errlen, NX_EIO, "%s: cannot follow the link", path);
    return NX_OK;
}

int nx_path_probe(const char *target) {
    char probe[PATH_MAX + 16];
    snprintf(probe, sizeof probe, "%s.XXXXXX", target);
    const int fd = mkstemp(probe);
    if (fd < 0) return errno;
    close(fd);
    remove(probe);
    return 0;
}

nx_status nx_write_check(const char *path, char *err, size_t errlen) {
    char target[PATH_MAX];
    const nx_status st = nx_path_target(path, target, err, errlen);
    if (st) return st;
    struct stat sb;
    int why;
    if (stat(target, &sb) != 0) why = nx_path_probe(target);
    else if (S_ISDIR(sb.st_mode)) why = EISDIR;
    else why = access(target, W_OK) == 0 ? 0 : errno;
    return why ? nx_fail(err, errlen, NX_EIO, "%s: cannot write: %s", path, strerror(why)) : NX_OK;
}
