/* Shared by the benchmark tools: a monotonic clock in nanoseconds and a comparator for sorting latencies. */
#ifndef AUTH_AGENT_BENCH_TIMING_H
#define AUTH_AGENT_BENCH_TIMING_H
#include <stdint.h>
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
#endif
