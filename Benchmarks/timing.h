/* Shared by the benchmark tools: a monotonic clock in nanoseconds, a comparator for sorting latencies, and a
 * process's CPU time from /proc. */
#ifndef AUTH_AGENT_BENCH_TIMING_H
#define AUTH_AGENT_BENCH_TIMING_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* utime+stime of a process, in clock ticks; -1 if unreadable. */
static inline long long proc_cpu_ticks(long pid) {
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = 0;
    char *p = strrchr(line, ')'); /* comm may contain spaces */
    if (!p) return -1;
    unsigned long long utime = 0, stime = 0;
    /* after ") ": state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2) return -1;
    return (long long)(utime + stime);
}
#endif
