/* The xdg-desktop-portal's OpenURI on a private connection to the session bus, blocking with a timeout, and then
 * the request's Response signal on the same connection. The agent calls both from threads of its own (never the bus
 * thread, never an event loop): a launch is rare and short, and a private connection keeps it independent of
 * whether the agent's own D-Bus front end is up. */
#include "agent_bus.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define AA_PORTAL_NAME "org.freedesktop.portal.Desktop"
#define AA_PORTAL_PATH "/org/freedesktop/portal/desktop"
#define AA_PORTAL_OPEN_URI "org.freedesktop.portal.OpenURI"
#define AA_PORTAL_REQUEST "org.freedesktop.portal.Request"

struct aa_portal_request {
    sd_bus *bus;
    /* Response matches: on the path predicted from handle_token, and on the returned handle if that differs. */
    sd_bus_slot *slots[2];
    /* The portal's unique name (the OpenURI reply's sender): a Response from anyone else is ignored. */
    char portal[256];
    int done;
    uint32_t response;
};

static int on_response(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
    (void)ret_error;
    struct aa_portal_request *request = userdata;
    const char *sender = sd_bus_message_get_sender(m);
    if (request->done || request->portal[0] == '\0' || !sender || strcmp(sender, request->portal) != 0) return 0;
    uint32_t response = 2;
    if (sd_bus_message_read(m, "u", &response) < 0) response = 2;
    request->response = response;
    request->done = 1;
    return 0;
}

void aa_portal_request_free(aa_portal_request *request) {
    if (!request) return;
    for (int i = 0; i < 2; i++) sd_bus_slot_unref(request->slots[i]);
    sd_bus_flush_close_unref(request->bus);
    free(request);
}

/* The request object path the portal will use for `token` (xdg-desktop-portal's documented rule): the caller's
 * unique name without its ':' and with '.' turned into '_'. */
static int request_path(sd_bus *bus, const char *token, char *path, size_t size) {
    const char *unique = NULL;
    int r = sd_bus_get_unique_name(bus, &unique);
    if (r < 0) return r;
    char sender[256];
    size_t n = 0;
    for (const char *c = unique[0] == ':' ? unique + 1 : unique; *c && n + 1 < sizeof sender; c++)
        sender[n++] = *c == '.' ? '_' : *c;
    sender[n] = '\0';
    r = snprintf(path, size, "/org/freedesktop/portal/desktop/request/%s/%s", sender, token);
    return r < 0 || (size_t)r >= size ? -ENAMETOOLONG : 0;
}

static void copy_out(char *out, size_t size, const char *text) {
    if (!out || size == 0) return;
    strncpy(out, text ? text : "", size - 1);
    out[size - 1] = '\0';
}

int aa_portal_open_uri(const char *uri, uint64_t timeout_usec, aa_portal_request **out, char *error_name,
                       size_t name_size, char *error_message, size_t message_size) {
    copy_out(error_name, name_size, "");
    copy_out(error_message, message_size, "");
    *out = NULL;
    struct aa_portal_request *request = calloc(1, sizeof *request);
    if (!request) return -ENOMEM;
    int r = sd_bus_open_user(&request->bus);
    if (r < 0) {
        copy_out(error_message, message_size, strerror(-r));
        aa_portal_request_free(request);
        return r;
    }
    sd_bus_set_method_call_timeout(request->bus, timeout_usec);
    /* Subscribe to the request's Response before asking, so it cannot be missed: the path is predictable from a
     * handle_token of our own (random, so two launches never share one). */
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce) nonce = (uint64_t)time(NULL) ^ (uint64_t)getpid();
    char token[40], path[512];
    snprintf(token, sizeof token, "auth_agent_%016llx", (unsigned long long)nonce);
    r = request_path(request->bus, token, path, sizeof path);
    if (r >= 0)
        r = sd_bus_match_signal(request->bus, &request->slots[0], NULL, path, AA_PORTAL_REQUEST, "Response",
                                on_response, request);
    if (r < 0) {
        copy_out(error_message, message_size, strerror(-r));
        aa_portal_request_free(request);
        return r;
    }
    sd_bus_error error = SD_BUS_ERROR_NULL;
    sd_bus_message *reply = NULL;
    /* OpenURI(s parent_window, s uri, a{sv} options) -> o handle. No parent window: the agent has none. */
    r = sd_bus_call_method(request->bus, AA_PORTAL_NAME, AA_PORTAL_PATH, AA_PORTAL_OPEN_URI, "OpenURI", &error,
                           &reply, "ssa{sv}", "", uri, 1, "handle_token", "s", token);
    if (r < 0) {
        copy_out(error_name, name_size, error.name);
        copy_out(error_message, message_size, error.message ? error.message : strerror(-r));
    } else {
        copy_out(request->portal, sizeof request->portal, sd_bus_message_get_sender(reply));
        const char *handle = NULL;
        /* A portal older than handle_token (before 0.9) picks its own path: listen there too (a Response sent
         * before this match is in place is missed, and then only its log line is lost). */
        if (sd_bus_message_read(reply, "o", &handle) > 0 && strcmp(handle, path) != 0)
            (void)sd_bus_match_signal(request->bus, &request->slots[1], NULL, handle, AA_PORTAL_REQUEST, "Response",
                                      on_response, request);
    }
    sd_bus_error_free(&error);
    sd_bus_message_unref(reply);
    if (r < 0) {
        aa_portal_request_free(request);
        return r;
    }
    *out = request;
    return 0;
}

int aa_portal_await_response(aa_portal_request *request, uint64_t timeout_usec) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t start = (uint64_t)now.tv_sec * 1000000 + (uint64_t)now.tv_nsec / 1000;
    while (!request->done) {
        int r = sd_bus_process(request->bus, NULL);
        if (r < 0) return r;
        /* The deadline holds on every pass: a peer that floods this connection does not keep the wait going. */
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t elapsed = (uint64_t)now.tv_sec * 1000000 + (uint64_t)now.tv_nsec / 1000 - start;
        if (request->done) break;
        if (elapsed >= timeout_usec) return -ETIMEDOUT;
        if (r > 0) continue;
        r = sd_bus_wait(request->bus, timeout_usec - elapsed);
        if (r < 0) return r;
    }
    return (int)(request->response > 1000 ? 2 : request->response);
}

int aa_portal_available(uint64_t timeout_usec) {
    sd_bus *bus = NULL;
    int r = sd_bus_open_user(&bus);
    if (r < 0) return r;
    sd_bus_set_method_call_timeout(bus, timeout_usec);
    /* Running now, or activatable on demand (the usual case: the portal starts on its first call). */
    int found = aa_bus_name_has_owner(bus, AA_PORTAL_NAME);
    if (found <= 0) {
        sd_bus_message *reply = NULL;
        r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "ListActivatableNames", NULL, &reply, "");
        found = r < 0 ? r : aa_bus_read_has_string(reply, AA_PORTAL_NAME) > 0;
        sd_bus_message_unref(reply);
    }
    sd_bus_flush_close_unref(bus);
    return found;
}

/* Copies the value of NAME=... from the strv into out (empty when absent or too long). */
static void aa_copy_env_value(char **env, const char *name, char *out, size_t size) {
    size_t length = strlen(name);
    out[0] = '\0';
    for (char **entry = env; entry && *entry; entry++) {
        if (strncmp(*entry, name, length) == 0 && (*entry)[length] == '=') {
            const char *value = *entry + length + 1;
            if (strlen(value) < size) strcpy(out, value);
            return;
        }
    }
}

int aa_manager_display(uint64_t timeout_usec, char *display, size_t display_size, char *wayland, size_t wayland_size) {
    sd_bus *bus = NULL;
    display[0] = '\0';
    wayland[0] = '\0';
    int r = sd_bus_open_user(&bus);
    if (r < 0) return r;
    sd_bus_set_method_call_timeout(bus, timeout_usec);
    sd_bus_error error = SD_BUS_ERROR_NULL;
    char **env = NULL;
    r = sd_bus_get_property_strv(bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                                 "org.freedesktop.systemd1.Manager", "Environment", &error, &env);
    if (r >= 0) {
        aa_copy_env_value(env, "DISPLAY", display, display_size);
        aa_copy_env_value(env, "WAYLAND_DISPLAY", wayland, wayland_size);
        /* An empty array comes back as NULL. */
        for (char **entry = env; entry && *entry; entry++) free(*entry);
        free(env);
        r = 0;
    }
    sd_bus_error_free(&error);
    sd_bus_flush_close_unref(bus);
    return r;
}
