/* The xdg-desktop-portal's OpenURI on a private connection to the session bus, blocking with a timeout. The agent
 * calls it from a thread of its own (never the bus thread, never an event loop): a launch is rare and short, and a
 * private connection keeps it independent of whether the agent's own D-Bus front end is up. */
#include "agent_bus.h"

#include <errno.h>
#include <string.h>

#define AA_PORTAL_NAME "org.freedesktop.portal.Desktop"
#define AA_PORTAL_PATH "/org/freedesktop/portal/desktop"
#define AA_PORTAL_OPEN_URI "org.freedesktop.portal.OpenURI"

static void copy_out(char *out, size_t size, const char *text) {
    if (!out || size == 0) return;
    strncpy(out, text ? text : "", size - 1);
    out[size - 1] = '\0';
}

int aa_portal_open_uri(const char *uri, uint64_t timeout_usec, char *error_name, size_t name_size,
                       char *error_message, size_t message_size) {
    copy_out(error_name, name_size, "");
    copy_out(error_message, message_size, "");
    sd_bus *bus = NULL;
    int r = sd_bus_open_user(&bus);
    if (r < 0) {
        copy_out(error_message, message_size, strerror(-r));
        return r;
    }
    sd_bus_set_method_call_timeout(bus, timeout_usec);
    sd_bus_error error = SD_BUS_ERROR_NULL;
    sd_bus_message *reply = NULL;
    /* OpenURI(s parent_window, s uri, a{sv} options) -> o handle. No parent window: the agent has none. */
    r = sd_bus_call_method(bus, AA_PORTAL_NAME, AA_PORTAL_PATH, AA_PORTAL_OPEN_URI, "OpenURI", &error, &reply,
                           "ssa{sv}", "", uri, 0);
    if (r < 0) {
        copy_out(error_name, name_size, error.name);
        copy_out(error_message, message_size, error.message ? error.message : strerror(-r));
    }
    sd_bus_error_free(&error);
    sd_bus_message_unref(reply);
    sd_bus_flush_close_unref(bus);
    return r < 0 ? r : 0;
}

int aa_portal_available(uint64_t timeout_usec) {
    sd_bus *bus = NULL;
    int r = sd_bus_open_user(&bus);
    if (r < 0) return r;
    sd_bus_set_method_call_timeout(bus, timeout_usec);
    int found = 0;
    sd_bus_message *reply = NULL;
    /* Running now, or activatable on demand (the usual case: the portal starts on its first call). */
    r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                           "NameHasOwner", NULL, &reply, "s", AA_PORTAL_NAME);
    if (r >= 0) {
        int owned = 0;
        if (sd_bus_message_read(reply, "b", &owned) > 0 && owned) found = 1;
    }
    sd_bus_message_unref(reply);
    reply = NULL;
    if (!found) {
        r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "ListActivatableNames", NULL, &reply, "");
        if (r >= 0) found = aa_bus_read_has_string(reply, AA_PORTAL_NAME) > 0;
    }
    sd_bus_message_unref(reply);
    sd_bus_flush_close_unref(bus);
    return r < 0 && !found ? r : found;
}
