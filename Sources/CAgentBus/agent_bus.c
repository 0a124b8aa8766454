#include "agent_bus.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus-vtable.h>

struct aa_agent_object {
    aa_bus_method_handler handler;
    void *context;
};

static int on_method(sd_bus_message *m, void *userdata, sd_bus_error *error) {
    const struct aa_agent_object *object = userdata;
    return object->handler(m, object->context, error);
}

/* Keep in step with dbus/dev.authagent.Agent.xml: a test compares what the agent serves with that file.
 * UNPRIVILEGED: sd-bus does no per-method access control on the user bus anyway; the handler checks the
 * caller's uid itself. */
static const sd_bus_vtable agent_vtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_METHOD_WITH_NAMES("GetAccessToken", "su", SD_BUS_PARAM(account) SD_BUS_PARAM(min_valid),
                             "sx", SD_BUS_PARAM(token) SD_BUS_PARAM(expires_at), on_method, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD_WITH_NAMES("GetAccessTokenForRequest", "susss",
                             SD_BUS_PARAM(account) SD_BUS_PARAM(min_valid) SD_BUS_PARAM(method) SD_BUS_PARAM(url)
                             SD_BUS_PARAM(dpop_nonce),
                             "sssx", SD_BUS_PARAM(token_type) SD_BUS_PARAM(token) SD_BUS_PARAM(dpop_proof)
                             SD_BUS_PARAM(expires_at), on_method, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD_WITH_NAMES("ListAccounts", "", "", "aa{sv}", SD_BUS_PARAM(accounts), on_method,
                             SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD_WITH_NAMES("GetStatus", "", "", "a{sv}aa{sv}", SD_BUS_PARAM(agent) SD_BUS_PARAM(accounts), on_method,
                             SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD_WITH_NAMES("Login", "s", SD_BUS_PARAM(account), "a{sv}", SD_BUS_PARAM(result), on_method,
                             SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD_WITH_NAMES("Logout", "s", SD_BUS_PARAM(account), "a{sv}", SD_BUS_PARAM(result), on_method,
                             SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_METHOD("Subscribe", "", "", on_method, SD_BUS_VTABLE_UNPRIVILEGED),
    SD_BUS_SIGNAL_WITH_NAMES("AccountChanged", "s", SD_BUS_PARAM(account), 0),
    SD_BUS_SIGNAL_WITH_NAMES("SignInRequired", "s", SD_BUS_PARAM(account), 0),
    SD_BUS_VTABLE_END
};

static void free_object(void *userdata) { free(userdata); }

int aa_bus_add_agent_object(sd_bus *bus, sd_bus_slot **slot, aa_bus_method_handler handler, void *context) {
    struct aa_agent_object *object = calloc(1, sizeof *object);
    if (!object) return -12; /* ENOMEM */
    object->handler = handler;
    object->context = context;
    int r = sd_bus_add_object_vtable(bus, slot, AA_BUS_PATH, AA_BUS_INTERFACE, agent_vtable, object);
    if (r < 0) {
        free(object);
        return r;
    }
    sd_bus_slot_set_destroy_callback(*slot, free_object);
    return r;
}

int aa_bus_emit_account_signal(sd_bus *bus, const char *destination, const char *member, const char *account) {
    sd_bus_message *m = NULL;
    int r = sd_bus_message_new_signal(bus, &m, AA_BUS_PATH, AA_BUS_INTERFACE, member);
    if (r < 0) return r;
    r = sd_bus_message_set_destination(m, destination);
    if (r >= 0) r = sd_bus_message_append(m, "s", account);
    if (r >= 0) r = sd_bus_send(bus, m, NULL);
    sd_bus_message_unref(m);
    return r;
}

int aa_bus_sender_identity(sd_bus_message *m, uid_t *uid, pid_t *pid) {
    sd_bus_creds *creds = NULL;
    int r = sd_bus_query_sender_creds(m, SD_BUS_CREDS_EUID | SD_BUS_CREDS_UID | SD_BUS_CREDS_PID, &creds);
    if (r < 0) return r;
    r = sd_bus_creds_get_euid(creds, uid);
    /* dbus-daemon reports one uid (UnixUserID, from SO_PEERCRED: the effective uid at connect time), which sd-bus
     * may file as the uid rather than the euid. */
    if (r < 0) r = sd_bus_creds_get_uid(creds, uid);
    if (r >= 0 && sd_bus_creds_get_pid(creds, pid) < 0) *pid = 0;
    sd_bus_creds_unref(creds);
    return r;
}

int aa_bus_error_set(sd_bus_error *error, const char *name, const char *message) {
    return sd_bus_error_set(error, name, message);
}

int aa_bus_reply_error(sd_bus_message *call, const char *name, const char *message) {
    sd_bus_error error = SD_BUS_ERROR_NULL;
    sd_bus_error_set(&error, name, message);
    int r = sd_bus_reply_method_error(call, &error);
    sd_bus_error_free(&error);
    return r;
}

#define AA_NOTIFY_NAME "org.freedesktop.Notifications"
#define AA_NOTIFY_PATH "/org/freedesktop/Notifications"

int aa_bus_notifications_get_capabilities(sd_bus *bus, sd_bus_message_handler_t callback, void *userdata) {
    return sd_bus_call_method_async(bus, NULL, AA_NOTIFY_NAME, AA_NOTIFY_PATH, AA_NOTIFY_NAME, "GetCapabilities",
                                    callback, userdata, "");
}

int aa_bus_notifications_notify(sd_bus *bus, const char *app_name, uint32_t replaces_id, const char *summary,
                                const char *body, char **actions, int urgency,
                                sd_bus_message_handler_t callback, void *userdata) {
    sd_bus_message *m = NULL;
    int r = sd_bus_message_new_method_call(bus, &m, AA_NOTIFY_NAME, AA_NOTIFY_PATH, AA_NOTIFY_NAME, "Notify");
    if (r < 0) return r;
    r = sd_bus_message_append(m, "susss", app_name, replaces_id, "", summary, body);
    if (r >= 0) r = sd_bus_message_append_strv(m, actions);
    if (r >= 0) {
        if (urgency >= 0) r = sd_bus_message_append(m, "a{sv}", 1, "urgency", "y", (uint8_t)urgency);
        else r = sd_bus_message_append(m, "a{sv}", 0);
    }
    if (r >= 0) r = sd_bus_message_append(m, "i", (int32_t)-1);
    if (r >= 0) r = sd_bus_call_async(bus, NULL, m, callback, userdata, 0);
    sd_bus_message_unref(m);
    return r;
}

int aa_bus_notifications_close(sd_bus *bus, uint32_t id) {
    return sd_bus_call_method_async(bus, NULL, AA_NOTIFY_NAME, AA_NOTIFY_PATH, AA_NOTIFY_NAME, "CloseNotification",
                                    NULL, NULL, "u", id);
}

int aa_bus_notifications_match_action(sd_bus *bus, sd_bus_message_handler_t callback, void *userdata) {
    return sd_bus_match_signal(bus, NULL, NULL, AA_NOTIFY_PATH, AA_NOTIFY_NAME, "ActionInvoked", callback, userdata);
}

int aa_bus_notifications_match_closed(sd_bus *bus, sd_bus_message_handler_t callback, void *userdata) {
    return sd_bus_match_signal(bus, NULL, NULL, AA_NOTIFY_PATH, AA_NOTIFY_NAME, "NotificationClosed", callback, userdata);
}

int aa_bus_read_has_string(sd_bus_message *m, const char *capability) {
    int r = sd_bus_message_enter_container(m, 'a', "s");
    if (r < 0) return r;
    int found = 0;
    const char *item = NULL;
    while ((r = sd_bus_message_read(m, "s", &item)) > 0)
        if (strcmp(item, capability) == 0) found = 1;
    if (r < 0) return r;
    sd_bus_message_exit_container(m);
    return found;
}

int aa_bus_name_has_owner(sd_bus *bus, const char *name) {
    sd_bus_message *reply = NULL;
    int r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "NameHasOwner", NULL, &reply, "s", name);
    if (r < 0) return r;
    int owned = 0;
    r = sd_bus_message_read(reply, "b", &owned);
    sd_bus_message_unref(reply);
    return r < 0 ? r : (owned ? 1 : 0);
}

int aa_bus_display_session_locked(sd_bus *bus, uint32_t uid) {
    char user_path[64];
    snprintf(user_path, sizeof user_path, "/org/freedesktop/login1/user/_%u", (unsigned)uid);
    sd_bus_error error = SD_BUS_ERROR_NULL;
    sd_bus_message *reply = NULL;
    int r = sd_bus_get_property(bus, "org.freedesktop.login1", user_path, "org.freedesktop.login1.User", "Display",
                                &error, &reply, "(so)");
    sd_bus_error_free(&error);
    if (r < 0) return r;
    const char *id = NULL, *path = NULL;
    r = sd_bus_message_read(reply, "(so)", &id, &path);
    /* No display session: logind says ("", "/"). */
    if (r < 0 || id == NULL || path == NULL || id[0] == '\0' || strcmp(path, "/") == 0) {
        sd_bus_message_unref(reply);
        return r < 0 ? r : -ENOENT;
    }
    char *session = strdup(path);
    sd_bus_message_unref(reply);
    if (session == NULL) return -ENOMEM;
    int locked = 0;
    r = sd_bus_get_property_trivial(bus, "org.freedesktop.login1", session, "org.freedesktop.login1.Session",
                                    "LockedHint", &error, 'b', &locked);
    sd_bus_error_free(&error);
    free(session);
    return r < 0 ? r : (locked ? 1 : 0);
}

int aa_bus_sent_by_owner_of(sd_bus_message *message, const char *name) {
    const char *sender = sd_bus_message_get_sender(message);
    if (sender == NULL) return 0;
    /* The bus daemon's own signals carry its name; no connection can send under it. */
    if (strcmp(name, "org.freedesktop.DBus") == 0) return strcmp(sender, name) == 0;
    sd_bus_creds *creds = NULL;
    if (sd_bus_get_name_creds(sd_bus_message_get_bus(message), name, SD_BUS_CREDS_UNIQUE_NAME, &creds) < 0) return 0;
    const char *owner = NULL;
    int same = sd_bus_creds_get_unique_name(creds, &owner) >= 0 && owner != NULL && strcmp(owner, sender) == 0;
    sd_bus_creds_unref(creds);
    return same;
}

int aa_bus_match_login1_properties(sd_bus *bus, sd_bus_message_handler_t callback, void *userdata) {
    return sd_bus_match_signal(bus, NULL, "org.freedesktop.login1", NULL, "org.freedesktop.DBus.Properties",
                               "PropertiesChanged", callback, userdata);
}
