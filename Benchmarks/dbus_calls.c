/* What a desktop program's token requests cost over D-Bus: COUNT calls of dev.authagent.Agent1.GetAccessToken
 * ("work", 0) on the session bus, one after another, either all on one bus connection (persistent, as a running
 * application holds it) or each on a connection of its own (new: sd_bus_open_user, Hello, the call, close, as a
 * short-lived program makes it). Prints one JSON object: calls/s, latency percentiles, errors, and the agent's CPU
 * per call from /proc/AGENT_PID/stat. Exits 1 if any call failed (the bench waits for the agent with COUNT 1).
 *
 *   dbus_calls AGENT_PID COUNT persistent|new
 */
#include <systemd/sd-bus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "timing.h"

static int call(sd_bus *bus) {
    sd_bus_message *reply = NULL;
    sd_bus_error error = SD_BUS_ERROR_NULL;
    const char *token;
    int64_t expires;
    int r = sd_bus_call_method(bus, "dev.authagent.Agent", "/dev/authagent/Agent1", "dev.authagent.Agent1",
                               "GetAccessToken", &error, &reply, "su", "work", 0);
    if (r >= 0) r = sd_bus_message_read(reply, "sx", &token, &expires);
    if (r < 0) fprintf(stderr, "dbus_calls: %s\n", error.message ? error.message : strerror(-r));
    sd_bus_error_free(&error);
    sd_bus_message_unref(reply);
    return r;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: dbus_calls AGENT_PID COUNT persistent|new\n");
        return 2;
    }
    int pid = atoi(argv[1]), count = atoi(argv[2]);
    int persistent = strcmp(argv[3], "persistent") == 0;
    if (count < 1 || (!persistent && strcmp(argv[3], "new") != 0)) return 2;
    uint64_t *latency = calloc(count, sizeof *latency);
    sd_bus *bus = NULL;
    if (persistent && sd_bus_open_user(&bus) < 0) return 1;
    int errors = 0;
    long long cpu0 = proc_cpu_ticks(pid);
    uint64_t t0 = now_ns();
    for (int i = 0; i < count; i++) {
        uint64_t started = now_ns();
        if (!persistent && sd_bus_open_user(&bus) < 0) { errors++; continue; }
        if (call(bus) < 0) errors++;
        if (!persistent) bus = sd_bus_flush_close_unref(bus);
        latency[i] = now_ns() - started;
    }
    double seconds = (now_ns() - t0) / 1e9;
    long long cpu = proc_cpu_ticks(pid) - cpu0;
    sd_bus_flush_close_unref(bus);
    qsort(latency, count, sizeof *latency, cmp_u64);
    printf("{\"mode\":\"%s\",\"calls\":%d,\"errors\":%d,\"seconds\":%.4f,\"calls_per_s\":%.1f,\"p50_us\":%.1f,"
           "\"p99_us\":%.1f,\"agent_cpu_us_per_call\":%.1f}\n",
           argv[3], count, errors, seconds, count / seconds, latency[count / 2] / 1e3, latency[count * 99 / 100] / 1e3,
           cpu0 < 0 ? -1.0 : cpu * 1e6 / sysconf(_SC_CLK_TCK) / count);
    free(latency);
    return errors ? 1 : 0;
}
