/* libsystemd, as far as auth-agent uses it. sd_notify, sd_listen_fds and sd_journal_sendv are not variadic and
 * import directly; sd_journal_send/print are variadic and are not used. */
#ifndef AUTH_AGENT_SYSTEMD_SHIM_H
#define AUTH_AGENT_SYSTEMD_SHIM_H
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#include <sys/uio.h>
static inline int aa_sd_listen_fds_start(void) { return SD_LISTEN_FDS_START; }
#endif
