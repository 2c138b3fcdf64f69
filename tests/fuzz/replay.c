/* replay.c — a main() that runs a fuzz harness on stored inputs, for builds
 * without libFuzzer (gcc, the release and sanitize builds).
 *
 *   fuzz_<target> PATH...
 *
 * Each PATH is a file or a directory; a directory stands for every regular
 * file directly in it, in name order, so a run is the same on every machine.
 * Each input is read into a buffer of exactly its size (as libFuzzer does, so
 * ASan sees a read past the end) and given to LLVMFuzzerTestOneInput, after
 * LLVMFuzzerInitialize if the harness has one. A broken check aborts inside
 * the harness; the input's name is printed first so the log says which one.
 * Exit status: 0 after at least one input, 1 if a path cannot be read or no
 * input was found: an empty or misspelt corpus must never pass. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Weak, so a harness without it still links; its address is then NULL. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static int run_file(const char *path) {
    size_t n;
    unsigned char *text = fuzz_read_file(path, &n);
    unsigned char *data = malloc(n ? n : 1);   /* exact size: no NUL after it */
    if (!data) FUZZ_DIE("out of memory");
    memcpy(data, text, n);
    free(text);
    printf("  %s (%zu bytes)\n", path, n);
    fflush(stdout);
    LLVMFuzzerTestOneInput(data, n);
    free(data);
    return 1;
}

static int is_regular(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Runs every regular file in dir; returns how many, -1 if dir is unreadable. */
static int run_dir(const char *dir) {
    struct dirent **names;
    int k = scandir(dir, &names, NULL, alphasort);
    if (k < 0) return -1;
    int ran = 0;
    for (int i = 0; i < k; i++) {
        char path[PATH_MAX];
        fuzz_path(path, dir, names[i]->d_name);
        if (is_regular(path)) ran += run_file(path);
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 1;
    }
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int ran = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int k = stat(argv[i], &st) != 0 ? -1 : S_ISDIR(st.st_mode) ? run_dir(argv[i]) : S_ISREG(st.st_mode) ? run_file(argv[i]) : -1;
        if (k < 0) {
            fprintf(stderr, "%s: cannot read %s\n", argv[0], argv[i]);
            return 1;
        }
        ran += k;
    }
    printf("%d input%s ran\n", ran, ran == 1 ? "" : "s");
    if (ran == 0) {
        fprintf(stderr, "%s: no input found: a replay without inputs tests nothing\n", argv[0]);
        return 1;
    }
    return 0;
}
