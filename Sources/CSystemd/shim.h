/* libsystemd, as far as auth-agent uses it. sd_notify and sd_listen_fds are not variadic and import directly. */
#ifndef AUTH_AGENT_SYSTEMD_SHIM_H
#define AUTH_AGENT_SYSTEMD_SHIM_H
#include <systemd/sd-daemon.h>
static inline int aa_sd_listen_fds_start(void) { return SD_LISTEN_FDS_START; }
#endif
