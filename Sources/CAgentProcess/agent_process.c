#include "agent_process.h"
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>

int aa_process_set_not_dumpable(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }
int aa_process_is_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }
int aa_process_limit_malloc_arenas(int arenas) { return mallopt(M_ARENA_MAX, arenas); }
int aa_process_trim_heap(void) { return malloc_trim(0); }

/* One mapping of /proc/self/smaps, while its fields are read. */
struct code_mapping { unsigned long start, end; int candidate; long anonymous_kb; };

static long release_if_clean(const struct code_mapping *m) {
    /* A page of it was ever written (a text relocation, a debugger's breakpoint): its private copy would be lost. */
    if (!m->candidate || m->anonymous_kb != 0) return 0;
    return madvise((void *)m->start, m->end - m->start, MADV_DONTNEED) == 0 ? (long)(m->end - m->start) : 0;
}

long aa_process_release_code_pages(void) {
    FILE *smaps = fopen("/proc/self/smaps", "re");
    if (!smaps) return -1;
    char line[4352];
    long advised = 0;
    struct code_mapping current = {0, 0, 0, 0};
    while (fgets(line, sizeof line, smaps)) {
        unsigned long start, end;
        char perms[5];
        int path_at = 0;
        long kb;
        if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &start, &end, perms, &path_at) >= 3 && path_at > 0) {
            advised += release_if_clean(&current);
            /* Private, read-only, executable, and backed by a file (not [vdso] or anonymous code). */
            current = (struct code_mapping){start, end, strcmp(perms, "r-xp") == 0 && line[path_at] == '/', 0};
        } else if (sscanf(line, "Anonymous: %ld kB", &kb) == 1) {
            current.anonymous_kb = kb;
        }
    }
    advised += release_if_clean(&current);
    fclose(smaps);
    return advised;
}
