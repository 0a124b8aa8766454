/* loadgen: concurrent clients for a newline-delimited Unix-socket server (the agent or the floor server).
 *
 *   loadgen --socket PATH [--clients N] [--mode new|persistent|once] [--duration SECONDS] [--count REQUESTS]
 *           [--request LINE] [--expect SUBSTRING] [--pid SERVER_PID] [--label TEXT] [--timeout SECONDS]
 *           [--processes]
 *
 * Modes: `new` opens a new connection per request (connect, write the line, read one reply line, close);
 * `persistent` keeps one connection per client and sends the next request after the previous reply;
 * `once` starts N clients at the same moment, each sending exactly one request on its own connection, and reports
 * the time until the last one is answered (the single-flight burst).
 * The run ends at --duration or after --count requests, whichever comes first (both bounded; defaults 3 s and
 * 2,000,000). Each request's latency (CLOCK_MONOTONIC, from before connect/write to the reply's newline) is kept;
 * a reply without --expect (default "\"result\"") counts as an error. With --pid, the server's CPU time
 * (utime+stime from /proc/PID/stat, all threads) is read before and after the run. Prints one JSON line.
 * With --processes each client is a process of its own (forked), so the server sees N peers with N pids, as it
 * does when N programs each run `authctl token`; without it the clients are threads of one process (one pid).
 * The counters and latencies live in shared memory either way.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "timing.h"

static const char *sock_path;
static const char *request = "{\"v\":1,\"id\":1,\"op\":\"token\",\"account\":\"work\"}";
static const char *expect = "\"result\"";
static char *request_line;
static size_t request_len;
static int clients = 1;
static const char *mode = "new";
static double duration = 3.0;
static long max_count = 2000000;
static int timeout_s = 30;

static int processes;
static uint64_t deadline_ns;
static uint64_t *latencies;            /* ns, indexed by the request's slot; shared memory */

/* What every client, thread or process, counts into: anonymous shared memory (lock-free atomics and a
 * process-shared barrier work across fork). */
static struct shared {
    atomic_long next_slot;
    atomic_long errors;
    atomic_int stop;
    atomic_long reply_bytes;
    atomic_long first_error_logged;
    _Atomic uint64_t last_done_ns;
    pthread_barrier_t start_barrier;
} *sh;

static void *shared_alloc(size_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("loadgen: mmap"); exit(1); }
    return p;
}

static int connect_socket(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = { .tv_sec = timeout_s };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    strncpy(addr.sun_path, sock_path, sizeof addr.sun_path - 1);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) { close(fd); return -1; }
    return fd;
}

static void note_error(const char *what, const char *detail) {
    atomic_fetch_add(&sh->errors, 1);
    if (atomic_fetch_add(&sh->first_error_logged, 1) == 0)
        fprintf(stderr, "loadgen: first error: %s%s%.200s\n", what, detail ? ": " : "", detail ? detail : "");
}

/* Sends the request and reads one reply line. Returns 0 if the reply is good. */
static int exchange(int fd, char *buf, size_t cap) {
    size_t off = 0;
    while (off < request_len) {
        ssize_t n = send(fd, request_line + off, request_len - off, MSG_NOSIGNAL);
        if (n < 0) { if (errno == EINTR) continue; note_error("send", strerror(errno)); return -1; }
        off += (size_t)n;
    }
    size_t have = 0;
    for (;;) {
        if (have + 1 >= cap) { note_error("reply too long", NULL); return -1; }
        ssize_t n = recv(fd, buf + have, cap - 1 - have, 0);
        if (n < 0) { if (errno == EINTR) continue; note_error("recv", strerror(errno)); return -1; }
        if (n == 0) { note_error("connection closed before the reply", NULL); return -1; }
        char *nl = memchr(buf + have, '\n', (size_t)n);
        have += (size_t)n;
        if (nl) {
            *nl = 0;
            atomic_store(&sh->reply_bytes, (long)(nl - buf) + 1);
            if (strstr(buf, expect) == NULL) { note_error("unexpected reply", buf); return -1; }
            return 0;
        }
    }
}

static void *client(void *arg) {
    (void)arg;
    size_t cap = 1 << 17;
    char *buf = malloc(cap);
    int persistent = strcmp(mode, "persistent") == 0, once = strcmp(mode, "once") == 0;
    int fd = -1;
    if (once) {
        pthread_barrier_wait(&sh->start_barrier);
        long slot = atomic_fetch_add(&sh->next_slot, 1);
        uint64_t t0 = now_ns();
        fd = connect_socket();
        int ok = fd >= 0 ? exchange(fd, buf, cap) == 0 : (note_error("connect", strerror(errno)), 0);
        uint64_t t1 = now_ns();
        if (fd >= 0) close(fd);
        if (ok) latencies[slot] = t1 - t0; else latencies[slot] = UINT64_MAX;
        uint64_t last = atomic_load(&sh->last_done_ns);
        while (t1 > last && !atomic_compare_exchange_weak(&sh->last_done_ns, &last, t1)) {}
        free(buf);
        return NULL;
    }
    pthread_barrier_wait(&sh->start_barrier);
    while (!atomic_load(&sh->stop)) {
        long slot = atomic_fetch_add(&sh->next_slot, 1);
        if (slot >= max_count) break;
        uint64_t t0 = now_ns();
        if (t0 >= deadline_ns) { atomic_store(&sh->stop, 1); latencies[slot] = UINT64_MAX - 1; break; }
        if (fd < 0) {
            fd = connect_socket();
            if (fd < 0) { note_error("connect", strerror(errno)); latencies[slot] = UINT64_MAX; usleep(1000); continue; }
        }
        int rc = exchange(fd, buf, cap);
        uint64_t t1 = now_ns();
        latencies[slot] = rc == 0 ? t1 - t0 : UINT64_MAX;
        if (!persistent || rc != 0) { close(fd); fd = -1; }
    }
    if (fd >= 0) close(fd);
    free(buf);
    return NULL;
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s --socket PATH [--clients N] [--mode new|persistent|once] [--duration S] [--count N]\n"
                    "          [--request LINE] [--expect SUBSTRING] [--pid PID] [--label TEXT] [--timeout S] [--processes]\n", argv0);
    exit(2);
}

int main(int argc, char **argv) {
    long pid = 0;
    const char *label = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--processes")) { processes = 1; continue; }
        if (i + 1 >= argc) usage(argv[0]);
        const char *v = argv[++i];
        if (!strcmp(a, "--socket")) sock_path = v;
        else if (!strcmp(a, "--clients")) clients = atoi(v);
        else if (!strcmp(a, "--mode")) mode = v;
        else if (!strcmp(a, "--duration")) duration = atof(v);
        else if (!strcmp(a, "--count")) max_count = atol(v);
        else if (!strcmp(a, "--request")) request = v;
        else if (!strcmp(a, "--expect")) expect = v;
        else if (!strcmp(a, "--pid")) pid = atol(v);
        else if (!strcmp(a, "--label")) label = v;
        else if (!strcmp(a, "--timeout")) timeout_s = atoi(v);
        else usage(argv[0]);
    }
    if (!sock_path || clients < 1 || clients > 5000 || max_count < 1 || max_count > 50000000 || duration <= 0 ||
        duration > 600 || (strcmp(mode, "new") && strcmp(mode, "persistent") && strcmp(mode, "once")))
        usage(argv[0]);
    int once = strcmp(mode, "once") == 0;
    if (once) max_count = clients;
    request_len = strlen(request) + 1;
    request_line = malloc(request_len);
    memcpy(request_line, request, request_len - 1);
    request_line[request_len - 1] = '\n';
    latencies = shared_alloc(((size_t)max_count + (size_t)clients) * sizeof *latencies);
    sh = shared_alloc(sizeof *sh);
    pthread_barrierattr_t battr;
    pthread_barrierattr_init(&battr);
    pthread_barrierattr_setpshared(&battr, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&sh->start_barrier, &battr, (unsigned)clients + 1);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t *threads = calloc((size_t)clients, sizeof *threads);
    pid_t *children = calloc((size_t)clients, sizeof *children);
    /* The deadline is set before the clients exist (a forked one copies it); it counts from here, so the start-up
     * of N processes is inside the duration, never past it. */
    long long cpu0 = pid ? proc_cpu_ticks(pid) : -1;
    uint64_t start = now_ns();
    deadline_ns = start + (uint64_t)(duration * 1e9);
    for (int i = 0; i < clients; i++) {
        if (processes) {
            children[i] = fork();
            if (children[i] < 0) { perror("loadgen: fork"); return 1; }
            if (children[i] == 0) { client(NULL); _exit(0); }
        } else if (pthread_create(&threads[i], &attr, client, NULL) != 0) {
            perror("loadgen: pthread_create"); return 1;
        }
    }
    pthread_barrier_wait(&sh->start_barrier);
    for (int i = 0; i < clients; i++) {
        if (processes) {
            int status;
            while (waitpid(children[i], &status, 0) < 0 && errno == EINTR) {}
        } else {
            pthread_join(threads[i], NULL);
        }
    }
    uint64_t end = once ? atomic_load(&sh->last_done_ns) : now_ns();
    long long cpu1 = pid ? proc_cpu_ticks(pid) : -1;

    long slots = atomic_load(&sh->next_slot);
    if (slots > max_count) slots = max_count;
    long n = 0;
    for (long i = 0; i < slots; i++)
        if (latencies[i] < UINT64_MAX - 1) latencies[n++] = latencies[i];
    qsort(latencies, (size_t)n, sizeof *latencies, cmp_u64);
    double secs = (double)(end - start) / 1e9;
#define PCT(p) (n ? (double)latencies[(size_t)((double)(n - 1) * (p))] / 1000.0 : 0.0)
    double cpu_ms = (cpu0 >= 0 && cpu1 >= 0) ? (double)(cpu1 - cpu0) * 1000.0 / (double)sysconf(_SC_CLK_TCK) : -1;
    printf("{\"label\":\"%s\",\"mode\":\"%s\",\"clients\":%d,\"requests\":%ld,\"errors\":%ld,\"seconds\":%.4f,"
           "\"ops_per_s\":%.1f,\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,\"reply_bytes\":%ld,"
           "\"server_cpu_ms\":%.1f,\"server_cpu_us_per_req\":%.2f}\n",
           label, mode, clients, n, atomic_load(&sh->errors), secs, n / secs, PCT(0.50), PCT(0.90), PCT(0.99),
           n ? (double)latencies[n - 1] / 1000.0 : 0.0, atomic_load(&sh->reply_bytes), cpu_ms,
           (cpu_ms >= 0 && n) ? cpu_ms * 1000.0 / (double)n : -1.0);
    return atomic_load(&sh->errors) ? 1 : 0;
}
