/* keyring_time: the cost of one refresh-token write and one lookup through the agent's own libsecret path
 * (the same C shim, Sources/CLibsecret/shim.h: same schema, default collection, a GCancellable per call), against the
 * Secret Service on the current session bus. Uses its own item (account "bench-keyring-probe"), deleted at the end.
 *
 *   keyring_time [RUNS [GAP_MS [OTHER_ITEMS]]]      (default 30 runs, at most 1000; gap 20 ms; 0 other items)
 *
 * OTHER_ITEMS (at most 5000) first adds that many items of another schema to the default collection, as a login
 * keyring that other programs have used for years holds them; they are left there (run it in a throwaway keyring).
 *
 * Two patterns, RUNS times each, every store a replace-in-place of an existing item, as a rotation does:
 *  - paced (the figures the benchmark subtracts): lookup, GAP_MS of idle, store. This is what a refresh does (read
 *    the refresh token, wait for the token endpoint, write the new one) and how a sign-in's store comes (after the
 *    token endpoint's wait). A store after idle costs more than one right after another call: the daemons' threads
 *    have gone to sleep. Each is preceded, as in the agent (LibsecretStore.inspect), by the default collection's
 *    state (aa_secret_keyring_state), timed on its own.
 *  - back to back: store, then lookup at once (reported for comparison).
 * Prints one JSON line with median/p90/min of each, in microseconds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "timing.h"
#include "../Sources/CLibsecret/shim.h"

static int timed_store(const char *account, const char *issuer, const char *client, const char *secret, uint64_t *out) {
    GError *error = NULL;
    GCancellable *c = g_cancellable_new();
    uint64_t t0 = now_ns();
    int ok = aa_secret_store(account, issuer, client, "auth-agent benchmark probe", secret, NULL, NULL, c, &error);
    *out = now_ns() - t0;
    g_object_unref(c);
    if (!ok) fprintf(stderr, "keyring_time: store failed: %s\n", error ? error->message : "?");
    return ok;
}

static int timed_lookup(const char *account, const char *issuer, const char *client, uint64_t *out) {
    GError *error = NULL;
    GCancellable *c = g_cancellable_new();
    uint64_t t0 = now_ns();
    gchar *valid_until = NULL, *warned_at = NULL;
    char *found = aa_secret_lookup_item(account, issuer, client, &valid_until, &warned_at, c, &error);
    *out = now_ns() - t0;
    g_free(valid_until);
    g_free(warned_at);
    g_object_unref(c);
    if (!found) { fprintf(stderr, "keyring_time: lookup found nothing\n"); return 0; }
    aa_secret_free(found);
    return 1;
}

static int timed_state(uint64_t *out) {
    GError *error = NULL;
    GCancellable *c = g_cancellable_new();
    uint64_t t0 = now_ns();
    int state = aa_secret_keyring_state(c, &error);
    *out = now_ns() - t0;
    g_object_unref(c);
    if (error) g_error_free(error);
    if (state != AA_KEYRING_AVAILABLE) { fprintf(stderr, "keyring_time: the keyring is not available (%d)\n", state); return 0; }
    return 1;
}

static int add_other_items(long count) {
    static const SecretSchema other = {"dev.auth-agent.BenchOther", SECRET_SCHEMA_NONE,
                                       {{"n", SECRET_SCHEMA_ATTRIBUTE_STRING}, {NULL, 0}}, 0, NULL, NULL, NULL, NULL,
                                       NULL, NULL, NULL};
    for (long i = 0; i < count; i++) {
        char n[24];
        snprintf(n, sizeof n, "%ld", i);
        GHashTable *attributes = g_hash_table_new(g_str_hash, g_str_equal);
        g_hash_table_insert(attributes, (gpointer)"n", n);
        GError *error = NULL;
        gboolean ok = secret_password_storev_sync(&other, attributes, SECRET_COLLECTION_DEFAULT, "another program's item",
                                                  "not-a-secret", NULL, &error);
        g_hash_table_unref(attributes);
        if (!ok) {
            fprintf(stderr, "keyring_time: adding other items failed: %s\n", error ? error->message : "?");
            return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    long runs = argc > 1 ? atol(argv[1]) : 30;
    long gap_ms = argc > 2 ? atol(argv[2]) : 20;
    long other_items = argc > 3 ? atol(argv[3]) : 0;
    if (runs < 1 || runs > 1000 || gap_ms < 0 || gap_ms > 10000 || other_items < 0 || other_items > 5000) {
        fprintf(stderr, "usage: %s [RUNS 1..1000 [GAP_MS 0..10000 [OTHER_ITEMS 0..5000]]]\n", argv[0]);
        return 2;
    }
    if (!add_other_items(other_items)) return 1;
    const char *account = "bench-keyring-probe", *issuer = "http://127.0.0.1/bench", *client = "bench";
    uint64_t *st = calloc((size_t)runs, sizeof *st), *lk = calloc((size_t)runs, sizeof *lk);
    uint64_t *st_b2b = calloc((size_t)runs, sizeof *st), *lk_b2b = calloc((size_t)runs, sizeof *lk);
    uint64_t *state_lk = calloc((size_t)runs, sizeof *st), *state_st = calloc((size_t)runs, sizeof *st);
    char secret[128];
    uint64_t untimed;
    /* Warm-up: connects to the bus and the service, and creates the item, so every timed store replaces in place. */
    for (int w = 0; w < 3; w++) {
        snprintf(secret, sizeof secret, "warmup-refresh-token-%d-0123456789abcdef0123456789abcdef", w);
        if (!timed_store(account, issuer, client, secret, &untimed)) return 1;
    }
    for (long r = 0; r < runs; r++) {   /* back to back */
        snprintf(secret, sizeof secret, "bench-refresh-token-%ld-0123456789abcdef0123456789abcdef", r);
        if (!timed_store(account, issuer, client, secret, &st_b2b[r]) || !timed_lookup(account, issuer, client, &lk_b2b[r]))
            return 1;
    }
    for (long r = 0; r < runs; r++) {   /* paced, as a refresh */
        snprintf(secret, sizeof secret, "bench-refresh-token-paced-%ld-0123456789abcdef0123456789abcdef", r);
        if (!timed_state(&state_lk[r]) || !timed_lookup(account, issuer, client, &lk[r])) return 1;
        struct timespec idle = {gap_ms / 1000, (gap_ms % 1000) * 1000000L};
        nanosleep(&idle, NULL);
        if (!timed_state(&state_st[r]) || !timed_store(account, issuer, client, secret, &st[r])) return 1;
    }
    aa_secret_clear(account, issuer, client, NULL, NULL);
    uint64_t *all[] = {st, lk, st_b2b, lk_b2b, state_lk, state_st};
    for (int a = 0; a < 6; a++) qsort(all[a], (size_t)runs, sizeof *st, cmp_u64);
#define PCT(a, p) ((double)(a)[(size_t)((double)(runs - 1) * (p))] / 1000.0)
    printf("{\"runs\":%ld,\"gap_ms\":%ld,\"other_items\":%ld,\"store_median_us\":%.1f,\"store_p90_us\":%.1f,\"store_min_us\":%.1f,"
           "\"lookup_median_us\":%.1f,\"lookup_p90_us\":%.1f,\"lookup_min_us\":%.1f,"
           "\"store_b2b_median_us\":%.1f,\"lookup_b2b_median_us\":%.1f,"
           "\"state_before_lookup_median_us\":%.1f,\"state_before_store_median_us\":%.1f}\n",
           runs, gap_ms, other_items, PCT(st, 0.5), PCT(st, 0.9), (double)st[0] / 1000.0, PCT(lk, 0.5), PCT(lk, 0.9),
           (double)lk[0] / 1000.0, PCT(st_b2b, 0.5), PCT(lk_b2b, 0.5), PCT(state_lk, 0.5), PCT(state_st, 0.5));
    return 0;
}
