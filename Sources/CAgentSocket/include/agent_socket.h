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

/* accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC; EINTR is retried. */
int aa_socket_accept(int listen_fd);
/* SO_PEERCRED. Returns 0 and fills the three values. */
int aa_socket_peer_credentials(int fd, int32_t *pid, uint32_t *uid, uint32_t *gid);
/* SO_PEERPIDFD (Linux 6.5+): a pidfd for the process that connected, which the caller closes. */
int aa_socket_peer_pidfd(int fd);
/* pidfd_open(2) of process `pid` (Linux 5.3+), close-on-exec; readable once the process exits. -1 when refused. */
int aa_pidfd_open(int32_t pid);
/* send(MSG_NOSIGNAL | MSG_DONTWAIT); EINTR is retried. Returns bytes sent, or -1 (EAGAIN: the buffer is full). */
long aa_socket_send(int fd, const void *bytes, unsigned long count);
/* recv(MSG_DONTWAIT); EINTR is retried. Returns bytes read, 0 at end of input, or -1 (EAGAIN: nothing now). */
long aa_socket_receive(int fd, void *bytes, unsigned long capacity);
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
#endif
