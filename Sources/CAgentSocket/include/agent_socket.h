/* The socket calls of the agent's accept loop that Swift cannot make cleanly: epoll_event is a packed struct with a
 * union, struct ucred needs _GNU_SOURCE, and SO_PEERPIDFD is newer than glibc 2.36's headers. Prefix: aa_socket_.
 * Every function returns -1 with errno set on failure unless it says otherwise. */
#ifndef AUTH_AGENT_SOCKET_H
#define AUTH_AGENT_SOCKET_H
#include <stdint.h>

/* An epoll instance (close-on-exec). */
int aa_socket_epoll_create(void);
/* What a connection is watched for, and what epoll reports for it. */
enum { AA_SOCKET_READABLE = 1, AA_SOCKET_WRITABLE = 2, AA_SOCKET_HANGUP = 4 };
/* Adds fd for readability (level-triggered; hang-ups and errors are always reported). `exclusive` sets
 * EPOLLEXCLUSIVE (for a listening socket watched by several loops). */
int aa_socket_epoll_add(int epoll_fd, int fd, int exclusive);
/* Changes what an added fd is watched for: AA_SOCKET_READABLE and/or AA_SOCKET_WRITABLE, or neither (hang-ups and
 * errors are still reported). */
int aa_socket_epoll_watch(int epoll_fd, int fd, uint32_t interest);
int aa_socket_epoll_remove(int epoll_fd, int fd);
/* Waits up to timeout_ms (-1: forever) and fills fds[i] and events[i] (AA_SOCKET_* bits; end of input reads as
 * readable) for up to max ready descriptors. Returns how many; 0 on timeout or EINTR. */
int aa_socket_epoll_wait(int epoll_fd, int32_t *fds, uint32_t *events, int max, int timeout_ms);

/* Whether the connection's peer is gone (poll reports POLLHUP or POLLERR now): 1 yes, 0 no (a half-close is not a
 * hang-up), -1 on error. epoll's report may be stale by the time it is handled; this asks the socket itself. */
int aa_socket_hung_up(int fd);

/* A non-blocking eventfd (close-on-exec) to wake a loop from another thread; signal adds 1, drain reads it to 0. */
int aa_socket_wakeup_create(void);
int aa_socket_wakeup_signal(int fd);
void aa_socket_wakeup_drain(int fd);
/* CLOCK_MONOTONIC in nanoseconds: the accept loop's timers. */
uint64_t aa_socket_monotonic_ns(void);

/* accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC; EINTR is retried. */
int aa_socket_accept(int listen_fd);
/* SO_PEERCRED. Returns 0 and fills the three values. */
int aa_socket_peer_credentials(int fd, int32_t *pid, uint32_t *uid, uint32_t *gid);
/* SO_PEERPIDFD (Linux 6.5+): a pidfd for the process that connected, which the caller closes. */
int aa_socket_peer_pidfd(int fd);
/* send(MSG_NOSIGNAL | MSG_DONTWAIT); EINTR is retried. Returns bytes sent, or -1 (EAGAIN: the buffer is full). */
long aa_socket_send(int fd, const void *bytes, unsigned long count);
/* recv(MSG_DONTWAIT); EINTR is retried. Returns bytes read, 0 at end of input, or -1 (EAGAIN: nothing now). */
long aa_socket_receive(int fd, void *bytes, unsigned long capacity);
/* A file's attributes as the kernel has them cached (statx with AT_STATX_DONT_SYNC): never a round trip to a
 * filesystem's server, so a FUSE daemon of the caller cannot stall the agent here. `empty_path`: `dir_fd` itself is
 * the file (AT_EMPTY_PATH; it may be an O_PATH descriptor). `mount_id` is 0 when the kernel does not report it. */
struct aa_file_info { uint64_t device; uint64_t inode; uint64_t size; uint64_t mount_id; uint32_t mode; };
int aa_file_info_at(int dir_fd, const char *path, int empty_path, struct aa_file_info *info);
/* aa_file_info_at of "/proc/PID/exe", following the link: the file process `pid` runs now. */
int aa_proc_exe_info(int32_t pid, struct aa_file_info *info);
/* Whether process `pid` runs in a pid namespace that a user namespace other than the agent's owns (a rootless
 * container, `unshare -Urp`, a Flatpak sandbox). A process there may hold CAP_SYS_ADMIN over that pid namespace, and
 * then the kernel takes credentials it attaches naming any pid of the namespace (SCM_CREDENTIALS): the sender of bytes
 * cannot be told from the process that connected. 0: the agent's own pid namespace, or one made by a privileged
 * process (owned by the agent's user namespace); 1: owned by another; -1: unreadable (errno). */
int aa_proc_pid_namespace_foreign(int32_t pid);
/* open(O_PATH | O_NOFOLLOW | O_CLOEXEC): names the file (or the symlink itself) without opening it, so no FIFO,
 * device or filesystem open handler runs. */
int aa_open_path_nofollow(const char *path);
/* Opens the file `path_fd` (an O_PATH descriptor) names for reading, non-blocking and without acquiring a
 * controlling terminal, and reads up to `capacity` bytes. Returns the count, or -1. Only for regular files the
 * caller checked with aa_file_info_at first. */
long aa_read_reopened(int path_fd, void *buffer, unsigned long capacity);
/* SO_PASSCRED on: every message received carries its sender's credentials, and one read never joins the bytes of two
 * senders. Set on the listening socket, it holds for every connection from the first byte (accepted sockets inherit
 * it; bytes sent before the accept are stamped because the socket has no owner yet). */
int aa_socket_pass_credentials(int fd);
/* recvmsg(MSG_DONTWAIT) of up to `capacity` bytes, which all come from one sender (SO_PASSCRED): `sender` is the pid
 * of the process that wrote them (SCM_CREDENTIALS, in the agent's pid namespace; 0 if the kernel gave none, or the
 * writer is in a pid namespace the agent cannot see). Returns as aa_socket_receive. */
long aa_socket_receive_from(int fd, void *bytes, unsigned long capacity, int32_t *sender);
/* The inode of the socket at the other end of the connected Unix socket `fd` (sock_diag, UNIX_DIAG_PEER). -1 when
 * the kernel cannot say (no unix_diag, or the peer is gone). */
int aa_socket_peer_inode(int fd, uint64_t *inode);
/* Whether process `pid` (whoever has that pid now) holds a descriptor of socket `inode` (/proc/PID/fd links read
 * `socket:[INODE]`): 1 yes, 0 no, -1 its descriptors cannot be read. */
int aa_process_holds_socket(int32_t pid, uint64_t inode);
#endif
