/* What a thread that runs its own loop needs, shared by the socket front end's accept loop and the D-Bus front end's
 * bus loop: an eventfd to wake it from another thread, and the monotonic clock its timers read. Prefix: aa_loop_.
 * Every function returns -1 with errno set on failure unless it says otherwise. */
#ifndef AUTH_AGENT_LOOP_H
#define AUTH_AGENT_LOOP_H
#include <stdint.h>

/* A non-blocking eventfd (close-on-exec) to wake a loop from another thread; signal adds 1, drain reads it to 0. */
int aa_loop_wakeup_create(void);
int aa_loop_wakeup_signal(int fd);
void aa_loop_wakeup_drain(int fd);
/* CLOCK_MONOTONIC in nanoseconds: a loop's timers. */
uint64_t aa_loop_monotonic_ns(void);

#endif
