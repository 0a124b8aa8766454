/* Process hardening that Swift cannot reach directly (prctl is C-variadic). Prefix: aa_process_. */
#ifndef AUTH_AGENT_PROCESS_H
#define AUTH_AGENT_PROCESS_H
/* Makes the process non-dumpable: no core dump, no ptrace or /proc/PID/mem access by same-user processes.
 * Returns 0 on success, -1 with errno set. */
int aa_process_set_not_dumpable(void);
/* 1 if dumpable, 0 if not, -1 on error. */
int aa_process_is_dumpable(void);
#endif
