#include "agent_loop.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

int aa_loop_wakeup_create(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

int aa_loop_wakeup_signal(int fd) {
    uint64_t one = 1;
    for (;;) {
        ssize_t n = write(fd, &one, sizeof one);
        if (n == sizeof one) return 0;
        /* EAGAIN: the counter is at its maximum, so a wake-up is pending anyway. */
        if (n < 0 && errno == EAGAIN) return 0;
        if (n < 0 && errno == EINTR) continue;
        return -1;
    }
}

void aa_loop_wakeup_drain(int fd) {
    uint64_t count;
    while (read(fd, &count, sizeof count) < 0 && errno == EINTR) {}
}

uint64_t aa_loop_monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}
