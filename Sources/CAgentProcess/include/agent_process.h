/* Process hardening that Swift cannot reach directly (prctl is C-variadic). Prefix: aa_process_. */
#ifndef AUTH_AGENT_PROCESS_H
#define AUTH_AGENT_PROCESS_H
/* Makes the process non-dumpable: no core dump, no ptrace or /proc/PID/mem access by same-user processes.
 * Returns 0 on success, -1 with errno set. */
int aa_process_set_not_dumpable(void);
/* Caps glibc's malloc arenas (mallopt M_ARENA_MAX; glibc otherwise keeps up to 8 per core, one per thread that
 * ever allocated, and never returns them). Returns 1 on success, 0 on failure. */
int aa_process_limit_malloc_arenas(int arenas);
/* Returns free heap memory to the kernel (malloc_trim(0)). Returns 1 if memory was released, 0 if not. */
int aa_process_trim_heap(void);
/* Unmaps the resident pages of every private read-only file mapping (r-xp: the agent's code and its libraries' code;
 * r--p: their constants, symbol and unwind tables, and read-only mapped files) that was never written (smaps
 * "Anonymous: 0"), with madvise(MADV_DONTNEED). Nothing is lost: the pages stay in the page cache and the next access
 * to one maps it again (a minor fault). Writable mappings, and read-only ones with a written private copy (relocated
 * data made read-only afterwards, RELRO; a text relocation; a breakpoint), are not touched: dropping those would lose
 * what was written. A read-only mapping cannot be written without mprotect, and the loader makes RELRO read-only only
 * after relocating it, so what is read here as unwritten stays so. Returns the bytes of the mappings advised, or -1
 * if /proc/self/smaps cannot be read. */
long aa_process_release_read_only_pages(void);
/* Starts PATH with ARGV (NULL-terminated; argv[0] first) as a child the caller never waits for: posix_spawn, no
 * shell, the caller's environment, stdin and stdout on /dev/null, stderr inherited, no other descriptor (closefrom
 * 3), an empty signal mask and every signal's default action. A small detached thread (64 KiB stack) waits for the
 * child, so it never stays a zombie, and no code of the caller runs when it exits. Returns the child's pid, or
 * -errno if it could not be started (ENOENT, EACCES, ...). */
int aa_process_spawn_detached(const char *path, char *const argv[]);
/* Starts PATH with ARGV as aa_process_spawn_detached does, and waits for it at most TIMEOUT_MS milliseconds (a
 * blocking call: run it off any event loop). Returns its exit status (0-255; 128 + the signal if a signal ended it),
 * -ETIMEDOUT after killing (SIGKILL) and reaping a child that took longer, or -errno if it could not be started. */
int aa_process_run_bounded(const char *path, char *const argv[], int timeout_ms);
/* Names the calling thread (prctl PR_SET_NAME; what ps -L and top -H show): the kernel keeps the first 15 bytes.
 * Returns 0 on success, -1 with errno set. */
int aa_process_name_thread(const char *name);
/* Starts PATH with ARGV (argv[0] first) held: a forked child that waits until aa_process_release(*RELEASE_FD) and
 * then runs PATH (execve, the caller's environment, signal mask and descriptors 0-2; the caller's close-on-exec
 * descriptors close). If the descriptor is closed without a release (the caller died), the child exits 127 instead.
 * The caller can tell others about the child (its pid) before it runs anything. Returns the pid, or -errno. */
int aa_process_spawn_held(const char *path, char *const argv[], int *release_fd);
/* Lets a child of aa_process_spawn_held run, and closes RELEASE_FD. Returns 0, or -errno. */
int aa_process_release(int release_fd);
/* A pidfd for process PID (pidfd_open, Linux 5.3+): readable once it exits. Returns the descriptor, or -errno. */
int aa_process_pidfd_open(int pid);
/* Runs PATH with ARGV (stdin /dev/null, stderr inherited, no other descriptor) and reads its stdout into BUFFER,
 * at most SIZE bytes (more is read and dropped), for at most TIMEOUT_MS milliseconds. Returns the bytes kept, with
 * its exit status (0-255, 128 + a signal) in *STATUS; -ETIMEDOUT after killing and reaping a child that took longer;
 * -errno if it could not be started. */
long aa_process_capture(const char *path, char *const argv[], char *buffer, unsigned long size, int timeout_ms,
                        int *status);
/* From process start until the service group traps them: SIGTERM and SIGINT only set a flag, which
 * aa_process_termination_held() reports (1 once one came), so a stop request in that window is not the default
 * action's instant death (a keyring write cut short, a socket file left behind) and is not lost either. */
void aa_process_hold_termination(void);
int aa_process_termination_held(void);
#endif
