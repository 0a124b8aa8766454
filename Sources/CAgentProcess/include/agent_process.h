/* Process hardening that Swift cannot reach directly (prctl is C-variadic). Prefix: aa_process_. */
#ifndef AUTH_AGENT_PROCESS_H
#define AUTH_AGENT_PROCESS_H
/* Makes the process non-dumpable: no core dump, no ptrace or /proc/PID/mem access by same-user processes.
 * Returns 0 on success, -1 with errno set. */
int aa_process_set_not_dumpable(void);
/* 1 if dumpable, 0 if not, -1 on error. */
int aa_process_is_dumpable(void);
/* Caps glibc's malloc arenas (mallopt M_ARENA_MAX; glibc otherwise keeps up to 8 per core, one per thread that
 * ever allocated, and never returns them). Returns 1 on success, 0 on failure. */
int aa_process_limit_malloc_arenas(int arenas);
/* Returns free heap memory to the kernel (malloc_trim(0)). Returns 1 if memory was released, 0 if not. */
int aa_process_trim_heap(void);
/* Unmaps the resident pages of every private executable file mapping (r-xp: the agent's code and its libraries'
 * code) that was never written (smaps "Anonymous: 0"), with madvise(MADV_DONTNEED). Nothing is lost: the pages stay
 * in the page cache and the next instruction fetched from one maps it again (a minor fault). Writable mappings, and
 * code with a written private copy (a text relocation, a breakpoint), are not touched. Returns the bytes of the
 * mappings advised, or -1 if /proc/self/smaps cannot be read. */
long aa_process_release_code_pages(void);
#endif
