#define _GNU_SOURCE
#include "agent_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

int aa_socket_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

int aa_socket_epoll_add(int epoll_fd, int fd, int exclusive) {
    /* EPOLLEXCLUSIVE allows no event bits but EPOLLIN, EPOLLOUT, EPOLLET and EPOLLWAKEUP. */
    struct epoll_event event = { .events = exclusive ? EPOLLIN | EPOLLEXCLUSIVE : EPOLLIN, .data.fd = fd };
    return epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event);
}

int aa_socket_epoll_watch(int epoll_fd, int fd, uint32_t interest) {
    struct epoll_event event = {
        .events = ((interest & AA_SOCKET_READABLE) ? EPOLLIN : 0) | ((interest & AA_SOCKET_WRITABLE) ? EPOLLOUT : 0),
        .data.fd = fd,
    };
    return epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &event);
}

int aa_socket_epoll_remove(int epoll_fd, int fd) { return epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, NULL); }

int aa_socket_epoll_wait(int epoll_fd, int32_t *fds, uint32_t *events, int max, int timeout_ms) {
    struct epoll_event ready[64];
    if (max > 64) max = 64;
    int n = epoll_wait(epoll_fd, ready, max, timeout_ms);
    if (n < 0) return errno == EINTR ? 0 : -1;
    for (int i = 0; i < n; i++) {
        uint32_t got = ready[i].events;
        fds[i] = ready[i].data.fd;
        events[i] = ((got & (EPOLLIN | EPOLLRDHUP)) ? AA_SOCKET_READABLE : 0) | ((got & EPOLLOUT) ? AA_SOCKET_WRITABLE : 0) |
                    ((got & (EPOLLHUP | EPOLLERR)) ? AA_SOCKET_HANGUP : 0);
    }
    return n;
}

int aa_socket_hung_up(int fd) {
    struct pollfd one = { .fd = fd, .events = 0 };
    int n = poll(&one, 1, 0);
    if (n < 0) return -1;
    return (one.revents & (POLLHUP | POLLERR)) ? 1 : 0;
}

int aa_socket_accept(int listen_fd) {
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0 || errno != EINTR) return fd;
    }
}

int aa_socket_peer_credentials(int fd, int32_t *pid, uint32_t *uid, uint32_t *gid) {
    struct ucred cred;
    socklen_t length = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) return -1;
    *pid = cred.pid;
    *uid = cred.uid;
    *gid = cred.gid;
    return 0;
}

int aa_socket_peer_pidfd(int fd) {
    int pidfd = -1;
    socklen_t length = sizeof pidfd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) != 0) return -1;
    return pidfd;
}

int aa_pidfd_open(int32_t pid) {
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

long aa_socket_send(int fd, const void *bytes, unsigned long count) {
    for (;;) {
        ssize_t n = send(fd, bytes, count, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0 || errno != EINTR) return n;
    }
}

long aa_socket_receive(int fd, void *bytes, unsigned long capacity) {
    for (;;) {
        ssize_t n = recv(fd, bytes, capacity, MSG_DONTWAIT);
        if (n >= 0 || errno != EINTR) return n;
    }
}

int aa_socket_pass_credentials(int fd) {
    int on = 1;
    return setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
}

/* One read and its sender's pid (0: the bytes carry none). The control buffer has room for the credentials only:
 * descriptors a client attaches (SCM_RIGHTS) do not fit beside them and the kernel closes them (MSG_CTRUNC); any
 * that did arrive are closed here, so a client cannot leave open files in the agent. */
long aa_socket_receive_from(int fd, void *bytes, unsigned long capacity, int32_t *sender) {
    union {
        struct cmsghdr align;
        char space[CMSG_SPACE(sizeof(struct ucred))];
    } control;
    struct iovec vector = { .iov_base = bytes, .iov_len = capacity };
    struct msghdr message = { .msg_iov = &vector, .msg_iovlen = 1, .msg_control = control.space,
                              .msg_controllen = sizeof control.space };
    ssize_t n;
    do { n = recvmsg(fd, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC); } while (n < 0 && errno == EINTR);
    *sender = 0;
    if (n <= 0) return n;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_CREDENTIALS &&
            header->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
            struct ucred credentials;
            memcpy(&credentials, CMSG_DATA(header), sizeof credentials);
            *sender = credentials.pid;
        } else if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS) {
            int *passed = (int *)CMSG_DATA(header);
            for (size_t i = 0; i < (header->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) close(passed[i]);
        }
    }
    return n;
}

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>

int aa_socket_peer_inode(int fd, uint64_t *inode) {
    struct stat own;
    if (fstat(fd, &own) != 0) return -1;
    int diag = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (diag < 0) return -1;
    struct {
        struct nlmsghdr header;
        struct unix_diag_req request;
    } query = {
        .header = { .nlmsg_len = sizeof query, .nlmsg_type = SOCK_DIAG_BY_FAMILY, .nlmsg_flags = NLM_F_REQUEST },
        .request = { .sdiag_family = AF_UNIX, .udiag_ino = (uint32_t)own.st_ino, .udiag_show = UDIAG_SHOW_PEER,
                     .udiag_cookie = { (uint32_t)~0U, (uint32_t)~0U } },
    };
    struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
    int result = -1;
    if (sendto(diag, &query, sizeof query, 0, (struct sockaddr *)&kernel, sizeof kernel) == (ssize_t)sizeof query) {
        union { struct nlmsghdr align; char bytes[1024]; } answer;
        ssize_t n;
        do { n = recv(diag, answer.bytes, sizeof answer.bytes, 0); } while (n < 0 && errno == EINTR);
        struct nlmsghdr *header = (struct nlmsghdr *)answer.bytes;
        if (n > 0 && NLMSG_OK(header, (unsigned)n) && header->nlmsg_type == SOCK_DIAG_BY_FAMILY) {
            struct unix_diag_msg *message = NLMSG_DATA(header);
            if (message->udiag_ino == (uint32_t)own.st_ino) {
                int left = (int)(header->nlmsg_len - NLMSG_LENGTH(sizeof *message));
                for (struct rtattr *attribute = (struct rtattr *)(message + 1); RTA_OK(attribute, left);
                     attribute = RTA_NEXT(attribute, left)) {
                    if (attribute->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(attribute) >= sizeof(uint32_t)) {
                        uint32_t peer;
                        memcpy(&peer, RTA_DATA(attribute), sizeof peer);
                        if (peer != 0) {
                            *inode = peer;
                            result = 0;
                        }
                    }
                }
            }
        }
    }
    close(diag);
    if (result != 0) errno = ENOENT;
    return result;
}
