/* keyring_time: the cost of one refresh-token write and one lookup through the agent's own libsecret path
 * (the same C shim, Sources/CLibsecret/shim.h: same schema, default collection, a GCancellable per call), against the
 * Secret Service on the current session bus. Uses its own item (account "bench-keyring-probe"), deleted at the end.
 *
 *   keyring_time [RUNS]      (default 30, at most 1000)
 *
 * Prints one JSON line: median/p90/min of store (replace-in-place of an existing item, as a rotation does) and lookup,
 * in microseconds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "timing.h"
#include "../Sources/CLibsecret/shim.h"

int main(int argc, char **argv) {
    long runs = argc > 1 ? atol(argv[1]) : 30;
    if (runs < 1 || runs > 1000) { fprintf(stderr, "usage: %s [RUNS 1..1000]\n", argv[0]); return 2; }
    const char *account = "bench-keyring-probe", *issuer = "http://127.0.0.1/bench", *client = "bench";
    uint64_t *st = calloc((size_t)runs, sizeof *st), *lk = calloc((size_t)runs, sizeof *lk);
    char secret[128];
    GError *error = NULL;
    /* Warm-up: connects to the bus and the service, and creates the item, so every timed store replaces in place. */
    for (int w = 0; w < 3; w++) {
        snprintf(secret, sizeof secret, "warmup-refresh-token-%d-0123456789abcdef0123456789abcdef", w);
        GCancellable *c = g_cancellable_new();
        if (!aa_secret_store(account, issuer, client, "auth-agent benchmark probe", secret, c, &error)) {
            fprintf(stderr, "keyring_time: store failed: %s\n", error ? error->message : "?");
            return 1;
        }
        g_object_unref(c);
    }
    for (long r = 0; r < runs; r++) {
        snprintf(secret, sizeof secret, "bench-refresh-token-%ld-0123456789abcdef0123456789abcdef", r);
        GCancellable *c = g_cancellable_new();
        uint64_t t0 = now_ns();
        int ok = aa_secret_store(account, issuer, client, "auth-agent benchmark probe", secret, c, &error);
        uint64_t t1 = now_ns();
        g_object_unref(c);
        if (!ok) { fprintf(stderr, "keyring_time: store failed: %s\n", error ? error->message : "?"); return 1; }
        c = g_cancellable_new();
        uint64_t t2 = now_ns();
        char *found = aa_secret_lookup(account, issuer, client, c, &error);
        uint64_t t3 = now_ns();
        g_object_unref(c);
        if (!found) { fprintf(stderr, "keyring_time: lookup found nothing\n"); return 1; }
        aa_secret_free(found);
        st[r] = t1 - t0;
        lk[r] = t3 - t2;
    }
    aa_secret_clear(account, issuer, client, NULL, NULL);
    qsort(st, (size_t)runs, sizeof *st, cmp_u64);
    qsort(lk, (size_t)runs, sizeof *lk, cmp_u64);
#define PCT(a, p) ((double)(a)[(size_t)((double)(runs - 1) * (p))] / 1000.0)
    printf("{\"runs\":%ld,\"store_median_us\":%.1f,\"store_p90_us\":%.1f,\"store_min_us\":%.1f,"
           "\"lookup_median_us\":%.1f,\"lookup_p90_us\":%.1f,\"lookup_min_us\":%.1f}\n",
           runs, PCT(st, 0.5), PCT(st, 0.9), (double)st[0] / 1000.0, PCT(lk, 0.5), PCT(lk, 0.9), (double)lk[0] / 1000.0);
    return 0;
}
