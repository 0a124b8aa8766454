/* The agent's D-Bus object (dev.authagent.Agent1) over libsystemd's sd-bus.
 *
 * Swift cannot use sd-bus's vtable macros (SD_BUS_METHOD_WITH_NAMES builds unions) nor call its variadic functions
 * (sd_bus_emit_signal, sd_bus_message_read), so the vtable and the few variadic calls live here, behind
 * non-variadic functions with an `aa_bus_` prefix. Everything else (reading arguments, building replies) is plain
 * sd-bus, called from Swift. None of this is thread-safe: the caller owns the bus on one thread. */
#ifndef AUTH_AGENT_BUS_H
#define AUTH_AGENT_BUS_H
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-bus.h>

#define AA_BUS_NAME "dev.authagent.Agent"
#define AA_BUS_PATH "/dev/authagent/Agent1"
#define AA_BUS_INTERFACE "dev.authagent.Agent1"

/* Called on the bus thread for every method call of the interface; `context` is what was registered. Return 1
 * after replying (now or later, with a reference to `m`), or a negative errno after setting `error`. */
typedef int (*aa_bus_method_handler)(sd_bus_message *m, void *context, sd_bus_error *error);

/* Registers the object at AA_BUS_PATH with the interface's vtable. The object lives until `*slot` is unreferenced. */
int aa_bus_add_agent_object(sd_bus *bus, sd_bus_slot **slot, aa_bus_method_handler handler, void *context);

/* Sends one of the interface's signals that carry an account name (AccountChanged, SignInRequired) to one peer,
 * `destination` (a unique name): a unicast signal, never a broadcast (docs/DBUS.md, "Signals"). */
int aa_bus_emit_account_signal(sd_bus *bus, const char *destination, const char *member, const char *account);

/* The sender's effective uid and pid, from the message or the bus daemon (GetConnectionCredentials). The pid is 0
 * when the bus does not know it. Negative errno on failure. */
int aa_bus_sender_identity(sd_bus_message *m, uid_t *uid, pid_t *pid);

/* Sets `error` to the named error and returns the negative errno sd-bus derives from it. */
int aa_bus_error_set(sd_bus_error *error, const char *name, const char *message);

/* Replies to `call` with the named error. */
int aa_bus_reply_error(sd_bus_message *call, const char *name, const char *message);

/* Desktop notifications (org.freedesktop.Notifications), as a client, without blocking: both calls are async and
 * `callback` gets the reply (or the error) on the bus thread; the slot is floating (freed with the bus). */
int aa_bus_notifications_get_capabilities(sd_bus *bus, sd_bus_message_handler_t callback, void *userdata);

/* Notify(app_name, replaces_id, "", summary, body, actions, hints, -1): `actions` a NULL-terminated list of
 * key/label pairs (NULL: none); `urgency` 0-2 sent as the "urgency" hint, negative: no hint. */
int aa_bus_notifications_notify(sd_bus *bus, const char *app_name, uint32_t replaces_id, const char *summary,
                                const char *body, char **actions, int urgency,
                                sd_bus_message_handler_t callback, void *userdata);

/* CloseNotification(id), fire and forget. */
int aa_bus_notifications_close(sd_bus *bus, uint32_t id);

/* Watches ActionInvoked(u id, s key) from any sender; the handler checks the sender and the id. */
int aa_bus_notifications_match_action(sd_bus *bus, sd_bus_message_handler_t callback, void *userdata);

/* Watches NotificationClosed(u id, u reason) from any sender; the handler checks the sender and the id. */
int aa_bus_notifications_match_closed(sd_bus *bus, sd_bus_message_handler_t callback, void *userdata);

/* Reads a GetCapabilities reply: 1 when `capability` is listed, 0 when not, negative errno on failure. */
int aa_bus_read_has_string(sd_bus_message *m, const char *capability);

/* org.freedesktop.DBus.NameHasOwner(name), blocking (used once at start-up on the system bus): 1 when the name has
 * an owner, 0 when not, negative errno on failure. */
int aa_bus_name_has_owner(sd_bus *bus, const char *name);

/* The xdg-desktop-portal (portal.c), each on a private session-bus connection of its own, blocking up to
 * `timeout_usec`: opens `uri` with org.freedesktop.portal.OpenURI.OpenURI. 0 when the portal accepted it, with
 * `*request` set to the accepted request (its connection stays open to hear the request's Response; free it with
 * aa_portal_request_free); else a negative errno, with the D-Bus error's name (empty when there was no bus at all)
 * and message copied out. */
typedef struct aa_portal_request aa_portal_request;
int aa_portal_open_uri(const char *uri, uint64_t timeout_usec, aa_portal_request **request, char *error_name,
                       size_t name_size, char *error_message, size_t message_size);
/* Waits up to `timeout_usec` for the request's org.freedesktop.portal.Request.Response signal from the portal:
 * its response code (0 the URI was opened, 1 the person dismissed the chooser, 2 it ended otherwise), or a negative
 * errno (-ETIMEDOUT: no Response in time; another: the bus connection failed). */
int aa_portal_await_response(aa_portal_request *request, uint64_t timeout_usec);
void aa_portal_request_free(aa_portal_request *request);
/* 1 when the session bus has the portal (running or activatable), 0 when not, negative errno without a bus. */
int aa_portal_available(uint64_t timeout_usec);
/* DISPLAY and WAYLAND_DISPLAY in the user manager's environment now (what a `systemd-run --user` unit gets); empty
 * strings when unset. 0, or negative errno without a user bus or manager. */
int aa_manager_display(uint64_t timeout_usec, char *display, size_t display_size, char *wayland, size_t wayland_size);

/* logind's LockedHint of the display session (org.freedesktop.login1.User.Display) of user `uid`: 1 locked, 0 not,
 * a negative errno when it cannot be known (no logind, no display session). A synchronous call. */
int aa_bus_display_session_locked(sd_bus *bus, uint32_t uid);
/* Every PropertiesChanged signal logind sends (its sessions', users', seats'). */
/* 1 when `message` was sent by `name`'s owner now: for "org.freedesktop.DBus", the bus daemon itself; for another
 * name, its current unique owner (a synchronous GetNameOwner). A signal matched on a well-known sender is delivered
 * to the agent whoever sends it straight to its connection, and sd-bus takes any unique-name sender for a match on
 * a well-known one: the handlers check with this before they believe a signal. */
int aa_bus_sent_by_owner_of(sd_bus_message *message, const char *name);

int aa_bus_match_login1_properties(sd_bus *bus, sd_bus_message_handler_t callback, void *userdata);
#endif
