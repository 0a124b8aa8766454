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
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

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

int aa_process_spawn_held(const char *path, char *const argv[], int *release_fd) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int failure = errno;
        close(fds[0]);
        close(fds[1]);
        return -failure;
    }
    if (pid == 0) {
        /* Async-signal-safe calls only from here on. */
        char go = 0;
        close(fds[1]);
        ssize_t n;
        do { n = read(fds[0], &go, 1); } while (n < 0 && errno == EINTR);
        if (n != 1 || go != 'g') _exit(127);
        execve(path, argv, environ);
        _exit(127);
    }
    close(fds[0]);
    *release_fd = fds[1];
    return pid;
}

int aa_process_release(int release_fd) {
    char go = 'g';
    ssize_t n;
    do { n = write(release_fd, &go, 1); } while (n < 0 && errno == EINTR);
    int failure = n == 1 ? 0 : -errno;
    close(release_fd);
    return failure;
}

int aa_process_pidfd_open(int pid) {
    long fd = syscall(SYS_pidfd_open, pid, 0);
    return fd < 0 ? -errno : (int)fd;
}

long aa_process_capture(const char *path, char *const argv[], char *buffer, unsigned long size, int timeout_ms,
                        int *status) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -errno;
    posix_spawn_file_actions_t actions;
    int failure = posix_spawn_file_actions_init(&actions);
    if (failure) { close(fds[0]); close(fds[1]); return -failure; }
    failure = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (!failure) failure = posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    if (!failure) failure = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    pid_t pid = -1;
    if (!failure) failure = posix_spawn(&pid, path, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (failure) { close(fds[0]); return -failure; }
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    unsigned long kept = 0;
    int timed_out = 0;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (elapsed >= timeout_ms) { timed_out = 1; break; }
        struct pollfd entry = {fds[0], POLLIN, 0};
        int ready = poll(&entry, 1, (int)(timeout_ms - elapsed));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) { timed_out = ready == 0; break; }
        char chunk[4096];
        ssize_t n = read(fds[0], chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        unsigned long take = (unsigned long)n < size - kept ? (unsigned long)n : size - kept;
        memcpy(buffer + kept, chunk, take);
        kept += take;
    }
    close(fds[0]);
    int child = 0;
    if (timed_out) {
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
        return -ETIMEDOUT;
    }
    while (waitpid(pid, &child, 0) < 0 && errno == EINTR) {}
    *status = WIFEXITED(child) ? WEXITSTATUS(child) : 128 + (WIFSIGNALED(child) ? WTERMSIG(child) : 0);
    return (long)kept;
}

static volatile sig_atomic_t termination_held = 0;

static void hold_termination(int signal_number) {
    (void)signal_number;
    termination_held = 1;
}

void aa_process_hold_termination(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = hold_termination;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
}

int aa_process_termination_held(void) { return termination_held ? 1 : 0; }
