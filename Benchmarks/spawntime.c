/* spawntime: whole-process time of a command (posix_spawn + waitpid), the way a shell script pays it.
 *
 *   spawntime [--label TEXT] RUNS COMMAND [ARGS...]
 *
 * Runs COMMAND RUNS times (after 5 warm-up runs), one after another, stdout and stdin on /dev/null, stderr kept;
 * every run must exit 0. Prints one JSON line with the median, p90, p99, mean and min in microseconds
 * (CLOCK_MONOTONIC from before posix_spawn to waitpid's return). RUNS is capped at 100,000.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "timing.h"

extern char **environ;

static int run_once(char **cmd, posix_spawn_file_actions_t *fa, uint64_t *elapsed) {
    pid_t pid;
    uint64_t t0 = now_ns();
    int rc = posix_spawn(&pid, cmd[0], fa, NULL, cmd, environ);
    if (rc != 0) { fprintf(stderr, "spawntime: cannot start %s: %s\n", cmd[0], strerror(rc)); return -1; }
    int status;
    if (waitpid(pid, &status, 0) < 0) { perror("spawntime: waitpid"); return -1; }
    *elapsed = now_ns() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "spawntime: %s failed (status 0x%x)\n", cmd[0], status);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *label = "";
    int i = 1;
    if (argc > 2 && !strcmp(argv[1], "--label")) { label = argv[2]; i = 3; }
    if (argc - i < 2) { fprintf(stderr, "usage: %s [--label TEXT] RUNS COMMAND [ARGS...]\n", argv[0]); return 2; }
    long runs = atol(argv[i]);
    if (runs < 1 || runs > 100000) { fprintf(stderr, "spawntime: RUNS must be 1..100000\n"); return 2; }
    char **cmd = argv + i + 1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    uint64_t *t = calloc((size_t)runs, sizeof *t), dummy;
    for (int w = 0; w < 5; w++) if (run_once(cmd, &fa, &dummy) < 0) return 1;
    uint64_t sum = 0;
    for (long r = 0; r < runs; r++) {
        if (run_once(cmd, &fa, &t[r]) < 0) return 1;
        sum += t[r];
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_u64);
#define PCT(p) ((double)t[(size_t)((double)(runs - 1) * (p))] / 1000.0)
    printf("{\"label\":\"%s\",\"command\":\"%s\",\"runs\":%ld,\"median_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,"
           "\"mean_us\":%.1f,\"min_us\":%.1f}\n",
           label, cmd[0], runs, PCT(0.5), PCT(0.9), PCT(0.99), (double)sum / (double)runs / 1000.0, (double)t[0] / 1000.0);
    return 0;
}
