#define _GNU_SOURCE
#include "agent_process.h"
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>

int aa_process_set_not_dumpable(void) { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }
int aa_process_limit_malloc_arenas(int arenas) { return mallopt(M_ARENA_MAX, arenas); }
int aa_process_trim_heap(void) { return malloc_trim(0); }
int aa_process_name_thread(const char *name) { return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0); }

/* One mapping of /proc/self/smaps, while its fields are read. */
struct read_only_mapping { unsigned long start, end; int candidate; long anonymous_kb; };

static long release_if_clean(const struct read_only_mapping *m) {
    /* A page of it was ever written (a text relocation, a debugger's breakpoint): its private copy would be lost. */
    if (!m->candidate || m->anonymous_kb != 0) return 0;
    return madvise((void *)m->start, m->end - m->start, MADV_DONTNEED) == 0 ? (long)(m->end - m->start) : 0;
}

long aa_process_release_read_only_pages(void) {
    FILE *smaps = fopen("/proc/self/smaps", "re");
    if (!smaps) return -1;
    char line[4352];
    long advised = 0;
    struct read_only_mapping current = {0, 0, 0, 0};
    while (fgets(line, sizeof line, smaps)) {
        unsigned long start, end;
        char perms[5];
        int path_at = 0;
        long kb;
        if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &start, &end, perms, &path_at) >= 3 && path_at > 0) {
            advised += release_if_clean(&current);
            /* Private, read-only (code, or constants and tables), and backed by a file (not [vdso] or anonymous). */
            int read_only = strcmp(perms, "r-xp") == 0 || strcmp(perms, "r--p") == 0;
            current = (struct read_only_mapping){start, end, read_only && line[path_at] == '/', 0};
        } else if (sscanf(line, "Anonymous: %ld kB", &kb) == 1) {
            current.anonymous_kb = kb;
        }
    }
    advised += release_if_clean(&current);
    fclose(smaps);
    return advised;
}

extern char **environ;

static void *reap_child(void *argument) {
    pid_t pid = (pid_t)(intptr_t)argument;
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    return NULL;
}

/* posix_spawn with the child set-up both spawn functions promise; the pid, or -errno. */
static pid_t spawn_child(const char *path, char *const argv[]) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    sigset_t none, all;
    int failure = posix_spawn_file_actions_init(&actions);
    if (failure) return -failure;
    failure = posix_spawnattr_init(&attributes);
    if (failure) { posix_spawn_file_actions_destroy(&actions); return -failure; }
    sigemptyset(&none);
    sigfillset(&all);
    if (!failure) failure = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (!failure) failure = posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    if (!failure) failure = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    if (!failure) failure = posix_spawnattr_setsigmask(&attributes, &none);
    if (!failure) failure = posix_spawnattr_setsigdefault(&attributes, &all);
    if (!failure) failure = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = -1;
    if (!failure) failure = posix_spawn(&pid, path, &actions, &attributes, argv, environ);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return failure ? -failure : pid;
}

int aa_process_spawn_detached(const char *path, char *const argv[]) {
    pid_t pid = spawn_child(path, argv);
    if (pid < 0) return pid;

    pthread_attr_t thread_attributes;
    pthread_t thread;
    int threaded = pthread_attr_init(&thread_attributes) == 0;
    if (threaded) {
        pthread_attr_setdetachstate(&thread_attributes, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&thread_attributes, 64 * 1024);
        threaded = pthread_create(&thread, &thread_attributes, reap_child, (void *)(intptr_t)pid) == 0;
        pthread_attr_destroy(&thread_attributes);
    }
    /* No thread (out of memory or threads): the child is reaped here if it has already exited, and otherwise stays a
     * zombie until the agent exits; it is still started. */
    if (!threaded) waitpid(pid, NULL, WNOHANG);
    return pid;
}

int aa_process_run_bounded(const char *path, char *const argv[], int timeout_ms) {
    pid_t pid = spawn_child(path, argv);
    if (pid < 0) return pid;
    int status = 0;
    struct timespec pause = {0, 5 * 1000 * 1000};
    for (int waited = 0;; waited += 5) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid) break;
        if (done < 0 && errno != EINTR) return -errno;
        if (waited >= timeout_ms) {
            kill(pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
            return -ETIMEDOUT;
        }
        nanosleep(&pause, NULL);
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}
