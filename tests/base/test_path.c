/* test_path.c — where a write to a path lands (a plain path, a link to a
 * file, a link to a file not there yet, relative and absolute), and
 * nx_write_check's answers for files, devices, directories and links,
 * none of which it creates. */
#include "test.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/path.h"

static int exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static void links_are_followed_to_where_a_write_lands(void) {
    const char *dir = nx_test_tmpdir("path_target");
    char err[512], target[PATH_MAX], file[1024], link[1024], want[PATH_MAX];
    snprintf(file, sizeof file, "%s/file", dir);
    CHECKF(nx_path_target(file, target, err, sizeof err) == NX_OK && strcmp(target, file) == 0, "%s", target);
    CHECK(nx_test_write_file(file, "x", 1) == 0);
    snprintf(link, sizeof link, "%s/to-file", dir);
    CHECK(symlink("file", link) == 0);
    CHECK(realpath(file, want) != NULL);
    CHECKF(nx_path_target(link, target, err, sizeof err) == NX_OK && strcmp(target, want) == 0, "%s", target);
    /* a link to nowhere: its text, taken from the link's directory */
    snprintf(link, sizeof link, "%s/to-new", dir);
    CHECK(symlink("new", link) == 0);
    snprintf(want, sizeof want, "%s/new", dir);
    CHECKF(nx_path_target(link, target, err, sizeof err) == NX_OK && strcmp(target, want) == 0, "%s", target);
    snprintf(link, sizeof link, "%s/to-abs", dir);
    CHECK(symlink("/nonexistent/new", link) == 0);
    CHECKF(nx_path_target(link, target, err, sizeof err) == NX_OK && strcmp(target, "/nonexistent/new") == 0, "%s", target);
    CHECK(!exists(want));
    /* a path longer than PATH_MAX is refused by name, not cut */
    char *longpath = malloc(PATH_MAX + 8);
    memset(longpath, 'a', PATH_MAX + 7);
    longpath[PATH_MAX + 7] = 0;
    char whole[PATH_MAX + 64];   /* room for the path the message names */
    CHECKF(nx_path_target(longpath, target, whole, sizeof whole) == NX_EINVAL && strstr(whole, "too long"), "%s", whole);
    free(longpath);
}

static void the_probe_makes_nothing_that_stays(void) {
    const char *dir = nx_test_tmpdir("path_probe");
    char target[1024];
    snprintf(target, sizeof target, "%s/out", dir);
    CHECK(nx_path_probe(target) == 0);
    CHECKF(nx_test_system("test -z \"$(ls -A '%s')\"", dir) == 0, "%s is not empty", dir);
    snprintf(target, sizeof target, "%s/missing/out", dir);
    CHECK(nx_path_probe(target) == ENOENT);
}

static void write_check_answers_as_fopen_would(void) {
    const char *dir = nx_test_tmpdir("write_check");
    char err[512], path[1024], link[1024], made[1024];
    snprintf(path, sizeof path, "%s/new", dir);
    CHECKF(nx_write_check(path, err, sizeof err) == NX_OK && !exists(path), "%s", err);
    CHECK(nx_test_write_file(path, "x", 1) == 0);
    CHECKF(nx_write_check(path, err, sizeof err) == NX_OK, "%s", err);
    CHECKF(nx_write_check("/dev/null", err, sizeof err) == NX_OK, "%s", err);
    CHECKF(nx_write_check(dir, err, sizeof err) == NX_EIO && strstr(err, dir) && strstr(err, "Is a directory"), "%s", err);
    CHECKF(nx_write_check("/nonexistent/port", err, sizeof err) == NX_EIO &&
               strcmp(err, "/nonexistent/port: cannot write: No such file or directory") == 0,
           "%s", err);
    /* a link to a file not there yet: checked at its target, which is not
     * made; a link into a missing directory is refused by the link's name */
    snprintf(link, sizeof link, "%s/link", dir);
    CHECK(symlink("made", link) == 0);
    snprintf(made, sizeof made, "%s/made", dir);
    CHECKF(nx_write_check(link, err, sizeof err) == NX_OK && !exists(made), "%s", err);
    FILE *f = fopen(link, "w");   /* and fopen agrees */
    CHECK(f && fclose(f) == 0 && exists(made));
    snprintf(link, sizeof link, "%s/astray", dir);
    CHECK(symlink("missing/port", link) == 0);
    CHECKF(nx_write_check(link, err, sizeof err) == NX_EIO && strstr(err, "astray: cannot write"), "%s", err);
    CHECK(fopen(link, "w") == NULL);
}

static const nx_test tests[] = {
    {"links_are_followed_to_where_a_write_lands",
     "a plain path; a link to a file (resolved); links to nowhere, relative (from the link's directory) and absolute; "
     "a path past PATH_MAX refused",
     links_are_followed_to_where_a_write_lands},
    {"the_probe_makes_nothing_that_stays", "a probe in a directory leaves it empty; one in a missing directory: ENOENT",
     the_probe_makes_nothing_that_stays},
    {"write_check_answers_as_fopen_would",
     "new and existing files, /dev/null: yes; a directory, a missing directory, a link into one: no, by name; "
     "a link to nowhere checked at its target, which stays unmade",
     write_check_answers_as_fopen_would},
};

NX_TEST_MAIN(tests)
