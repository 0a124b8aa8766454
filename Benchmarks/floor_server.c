/* floor_server: the Unix-socket floor for scripts/bench.
 *
 *   floor_server SOCKET_PATH REPLY_BYTES [checks]
 *
 * A minimal single-threaded epoll server, i.e. the best an agent's event loop could do: for every connection it
 * checks the peer's uid with SO_PEERCRED (as any credential agent must), and for every request line it receives it
 * writes one fixed reply line of REPLY_BYTES bytes (newline included; pass the size of the agent's real `token`
 * reply). Connections stay open until the client closes them, so both "new connection per request" and
 * "persistent connection" clients work. Runs until SIGTERM/SIGINT.
 *
 * With `checks`, it also makes the kernel calls the agent's caller identity makes (Caller.identify, read in full for
 * every connection: docs/ARCHITECTURE.md; Benchmarks/identity_cost.sh): SO_PASSCRED on the listening socket, so every
 * message carries its sender and is read with recvmsg (a request written by another process is refused,
 * SECURITY.md), and for every connection identity_checks: the same system calls, in the same order, on a kernel
 * with SO_PEERPIDFD (the agent also parses what it reads; that user-space work is not copied here).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_LINE 65536

struct conn {
    int fd;
    size_t have;              /* bytes of the request line read so far */
    size_t pending;           /* reply bytes still to write (a previous write was short) */
    size_t pending_off;
};

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static char *reply;
static size_t reply_len;
static int checks;

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* Reads a small /proc file the way the agent does: open, one read, close. */
static void read_proc_file(const char *path) {
    char buffer[4096];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (read(fd, buffer, sizeof buffer) < 0) { /* what the agent would refuse; the cost is the same */ }
    close(fd);
}

/* The system calls of the agent's identity read for one connection (Caller.identify, with a pidfd): the peer's
 * pidfd; /proc/PID/stat (start time, controlling terminal); the executable's path; /proc/PID/cgroup (the unit);
 * the root (a Flatpak app's /.flatpak-info is read only for a caller with a root of its own); the pid namespace;
 * the replaced-file check (the file behind exe against the file now at its path); the pidfd still running. */
static void identity_checks(int fd, pid_t pid) {
    char path[64], link[4096];
    struct statx info;
    struct stat namespace;
    const unsigned mask = STATX_TYPE | STATX_INO | STATX_SIZE | STATX_MNT_ID;
    int pidfd = -1;
    socklen_t len = sizeof pidfd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0) pidfd = -1;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    read_proc_file(path);
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, link, sizeof link - 1);
    link[n > 0 ? n : 0] = 0;
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    read_proc_file(path);
    snprintf(path, sizeof path, "/proc/%d/root", (int)pid);
    statx(AT_FDCWD, path, AT_STATX_DONT_SYNC, mask, &info);
    snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
    stat(path, &namespace);
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    statx(AT_FDCWD, path, AT_STATX_DONT_SYNC, mask, &info);
    if (n > 0) statx(AT_FDCWD, link, AT_STATX_DONT_SYNC, mask, &info);
    if (pidfd >= 0) {
        struct pollfd running = { .fd = pidfd, .events = POLLIN };
        poll(&running, 1, 0);
        close(pidfd);
    }
}

static void close_conn(int ep, struct conn *c) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
}

/* Writes what is pending; returns -1 on a dead peer, 0 if all written, 1 if it would block. */
static int flush_pending(struct conn *c) {
    while (c->pending > 0) {
        ssize_t n = send(c->fd, reply + c->pending_off, c->pending, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) return 1;
            return -1;
        }
        c->pending -= (size_t)n;
        c->pending_off += (size_t)n;
    }
    return 0;
}

/* Reads and answers; returns -1 when the connection should be closed. */
static int on_readable(int ep, struct conn *c) {
    for (;;) {
        char tmp[4096];
        ssize_t n;
        if (checks) {
            union { struct cmsghdr align; char space[CMSG_SPACE(sizeof(struct ucred))]; } control;
            struct iovec vector = { .iov_base = tmp, .iov_len = sizeof tmp };
            struct msghdr message = { .msg_iov = &vector, .msg_iovlen = 1, .msg_control = control.space,
                                      .msg_controllen = sizeof control.space };
            n = recvmsg(c->fd, &message, MSG_CMSG_CLOEXEC);
        } else {
            n = recv(c->fd, tmp, sizeof tmp, 0);
        }
        if (n == 0) return -1;
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) return 0;
            return -1;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (tmp[i] != '\n') {
                if (++c->have > MAX_LINE) return -1;
                continue;
            }
            c->have = 0;
            if (c->pending > 0) return -1; /* a client that does not read its replies: not part of the benchmark */
            c->pending = reply_len;
            c->pending_off = 0;
            int r = flush_pending(c);
            if (r < 0) return -1;
            if (r > 0) {
                struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = c };
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "checks") != 0)) {
        fprintf(stderr, "usage: %s SOCKET_PATH REPLY_BYTES [checks]\n", argv[0]);
        return 2;
    }
    checks = argc == 4;
    const char *path = argv[1];
    reply_len = (size_t)strtoul(argv[2], NULL, 10);
    if (reply_len < 2 || reply_len > MAX_LINE) {
        fprintf(stderr, "floor_server: REPLY_BYTES must be 2..%d\n", MAX_LINE);
        return 2;
    }
    /* A JSON-looking reply of exactly reply_len bytes: {"v":1,"id":1,"result":{"x":"aaa..."}}\n */
    reply = malloc(reply_len);
    memset(reply, 'a', reply_len);
    const char *head = "{\"v\":1,\"id\":1,\"result\":{\"x\":\"", *tail = "\"}}";
    if (reply_len > strlen(head) + strlen(tail) + 1) {
        memcpy(reply, head, strlen(head));
        memcpy(reply + reply_len - 1 - strlen(tail), tail, strlen(tail));
    }
    reply[reply_len - 1] = '\n';

    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof addr.sun_path) { fprintf(stderr, "floor_server: path too long\n"); return 2; }
    strcpy(addr.sun_path, path);
    unlink(path);
    mode_t old = umask(0177);
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) < 0) { perror("floor_server: bind"); return 1; }
    umask(old);
    int one = 1;
    if (checks && setsockopt(ls, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0) { perror("floor_server: SO_PASSCRED"); return 1; }
    if (listen(ls, 256) < 0) { perror("floor_server: listen"); return 1; } /* the agent's backlog too */

    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = { .events = EPOLLIN, .data.ptr = NULL };
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &lev);
    uid_t me = getuid();

    struct epoll_event events[256];
    while (!stop) {
        int n = epoll_wait(ep, events, 256, 500);
        if (n < 0) { if (errno == EINTR) continue; perror("floor_server: epoll_wait"); return 1; }
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (c == NULL) {
                for (;;) {
                    int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (fd < 0) break;
                    struct ucred cred;
                    socklen_t len = sizeof cred;
                    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != me) {
                        close(fd);
                        continue;
                    }
                    if (checks) identity_checks(fd, cred.pid);
                    c = calloc(1, sizeof *c);
                    c->fd = fd;
                    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
                }
                continue;
            }
            if (events[i].events & EPOLLOUT) {
                int r = flush_pending(c);
                if (r < 0) { close_conn(ep, c); continue; }
                if (r == 0) {
                    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                }
            }
            if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                if (on_readable(ep, c) < 0) close_conn(ep, c);
            }
        }
    }
    unlink(path);
    return 0;
}
