/* A small, non-variadic C API over libsecret for Swift (which cannot call C-variadic functions).
 * Every symbol is prefixed aa_secret_. Errors come back as GError; aa_secret_error_kind() classifies them
 * because GLib's error-domain macros are function-like and do not import into Swift. */
#ifndef AUTH_AGENT_LIBSECRET_SHIM_H
#define AUTH_AGENT_LIBSECRET_SHIM_H

/* libsecret's stable API only (no SECRET_API_SUBJECT_TO_CHANGE). */
#include <libsecret/secret.h>
#include <gio/gio.h>
#include <string.h>

/* Beside the key (account, issuer, client_id), an item may carry two dates as decimal Unix seconds: when the
 * sign-in ends and when the user was last warned of that. Attributes are not secret, and neither are these dates;
 * keeping them out of the secret means that every agent, older ones included, reads the secret as the bare
 * credential. An item without them reads as "not known". */
#define AA_SECRET_VALID_UNTIL "valid_until"
#define AA_SECRET_WARNED_AT "warned_at"

/* The schema of our items. Attribute names are part of the on-disk contract: do not rename. The key's three find
 * an item whatever else it carries (a search matches the attributes it names). */
static inline const SecretSchema *aa_secret_schema(void) {
    static const SecretSchema schema = {
        "dev.auth-agent.RefreshToken", SECRET_SCHEMA_NONE,
        {
            { "account", SECRET_SCHEMA_ATTRIBUTE_STRING },
            { "issuer", SECRET_SCHEMA_ATTRIBUTE_STRING },
            { "client_id", SECRET_SCHEMA_ATTRIBUTE_STRING },
            { AA_SECRET_VALID_UNTIL, SECRET_SCHEMA_ATTRIBUTE_STRING },
            { AA_SECRET_WARNED_AT, SECRET_SCHEMA_ATTRIBUTE_STRING },
            { NULL, 0 },
        },
        0, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    };
    return &schema;
}

static inline GHashTable *aa_secret_attributes(const char *account, const char *issuer, const char *client_id) {
    GHashTable *attributes = g_hash_table_new(g_str_hash, g_str_equal);
    g_hash_table_insert(attributes, (gpointer)"account", (gpointer)account);
    g_hash_table_insert(attributes, (gpointer)"issuer", (gpointer)issuer);
    g_hash_table_insert(attributes, (gpointer)"client_id", (gpointer)client_id);
    return attributes;
}

/* The key's attributes plus the dates that are given (NULL: left out). */
static inline GHashTable *aa_secret_item_attributes(const char *account, const char *issuer, const char *client_id,
                                                    const char *valid_until, const char *warned_at) {
    GHashTable *attributes = aa_secret_attributes(account, issuer, client_id);
    if (valid_until) g_hash_table_insert(attributes, (gpointer)AA_SECRET_VALID_UNTIL, (gpointer)valid_until);
    if (warned_at) g_hash_table_insert(attributes, (gpointer)AA_SECRET_WARNED_AT, (gpointer)warned_at);
    return attributes;
}

/* The items of our schema that carry `attributes`, locked ones included (SECRET_SEARCH_ALL; a locked item refuses
 * what is asked of it with IsLocked, reported as the keyring being locked), with their secrets when `flags` has
 * SECRET_SEARCH_LOAD_SECRETS (an unlocked item's only). A list of SecretItem (free with g_list_free_full(..,
 * g_object_unref)); NULL with *error set on failure, NULL with no error when there are none. */
static inline GList *aa_secret_search(SecretService *service, GHashTable *attributes, SecretSearchFlags flags,
                                      GCancellable *cancellable, GError **error) {
    return secret_service_search_sync(service, aa_secret_schema(), attributes, SECRET_SEARCH_ALL | flags, cancellable,
                                      error);
}

/* Waiting on a libsecret call that can show a prompt (Unlock, CreateItem, Delete), bounded by the caller's
 * cancellable. libsecret's own _sync versions of these can outlive it for good: a cancelled prompt is dismissed with
 * a Dismiss call that does not use the cancellable, made on the thread that cancels (the store's deadline timer), so
 * its answer goes to that thread's default main context, which nothing in this program runs; the call then ends only
 * with the prompt's Completed signal, which a stalled service never sends, and the store's serial queue stayed held
 * (secret-prompt.c, on_prompt_cancelled; KeyringIsolatedBusTests.testStalledSecretService).
 * So the call is started with its async version on the shim's own main context, which this thread then runs until
 * the call completes or the cancellable fires. A call given up on is left to finish on its own: its completion (and
 * any signal it still waits for) is dispatched, and what it holds freed, by a later wait on the same context. The
 * calls run one at a time on the store's serial queue, so the context is never run by two threads at once, and the
 * AaSecretWait, owned by the waiter and by the call's callback (whichever comes last frees it), needs no lock. */
typedef struct {
    int refs;
    GAsyncResult *result;
} AaSecretWait;

static inline GMainContext *aa_secret_context(void) {
    static GMainContext *context = NULL;
    if (g_once_init_enter(&context)) g_once_init_leave(&context, g_main_context_new());
    return context;
}

static inline void aa_secret_wait_unref(AaSecretWait *wait) {
    if (--wait->refs > 0) return;
    if (wait->result) g_object_unref(wait->result);
    g_free(wait);
}

/* The call's GAsyncReadyCallback; its user_data is the AaSecretWait. */
static inline void aa_secret_wait_done(GObject *source, GAsyncResult *result, gpointer wait) {
    ((AaSecretWait *)wait)->result = g_object_ref(result);
    aa_secret_wait_unref(wait);
}

/* Makes the shim's context this thread's default, so that the call started next completes there. */
static inline AaSecretWait *aa_secret_wait_begin(void) {
    g_main_context_push_thread_default(aa_secret_context());
    AaSecretWait *wait = g_new0(AaSecretWait, 1);
    wait->refs = 2;
    return wait;
}

/* Runs the context until the call started since aa_secret_wait_begin completes (its result: give it to the call's
 * _finish, then g_object_unref) or `cancellable` fires (NULL with *error set to G_IO_ERROR_CANCELLED at once,
 * whatever the call still waits for). */
static inline GAsyncResult *aa_secret_wait_end(AaSecretWait *wait, GCancellable *cancellable, GError **error) {
    GMainContext *context = aa_secret_context();
    GSource *wake = g_cancellable_source_new(cancellable);
    g_source_set_dummy_callback(wake);
    g_source_attach(wake, context);
    while (wait->result == NULL && !g_cancellable_is_cancelled(cancellable)) g_main_context_iteration(context, TRUE);
    g_source_destroy(wake);
    g_source_unref(wake);
    g_main_context_pop_thread_default(context);
    GAsyncResult *result = wait->result ? g_object_ref(wait->result) : NULL;
    aa_secret_wait_unref(wait);
    if (result == NULL) g_set_error(error, G_IO_ERROR, G_IO_ERROR_CANCELLED, "the keyring call was cancelled");
    return result;
}

/* Unlocks `item` if it is locked to this client; FALSE with *error set when that fails or is refused (IsLocked, which
 * reads as the keyring being locked). KeePassXC with "Confirm when passwords are retrieved by clients" (its default)
 * shows a new client's items as locked until the user allows the access in its dialog, which the unlock asks for;
 * the bounded call (the store's deadline cancels it, which dismisses the dialog) waits for that answer. Reads and
 * writes run only once aa_secret_keyring_state said AVAILABLE (or, for the GNOME keyring, no default collection
 * yet), so a locked database's own unlock dialog is never what this asks for; the GNOME keyring's items in an
 * unlocked collection are never locked, so it is asked nothing (and no round trip is spent: searching with
 * SECRET_SEARCH_UNLOCK cost one on every read and write). */
static inline gboolean aa_secret_unlock_item(SecretService *service, SecretItem *item, GCancellable *cancellable,
                                             GError **error) {
    if (!secret_item_get_locked(item)) return TRUE;
    GList one = { .data = item, .next = NULL, .prev = NULL };
    AaSecretWait *wait = aa_secret_wait_begin();
    secret_service_unlock(service, &one, cancellable, aa_secret_wait_done, wait);
    GAsyncResult *done = aa_secret_wait_end(wait, cancellable, error);
    if (done == NULL) return FALSE;
    gint unlocked = secret_service_unlock_finish(service, done, NULL, error);
    g_object_unref(done);
    if (unlocked < 0) return FALSE;
    if (unlocked == 0) {
        g_set_error(error, SECRET_ERROR, SECRET_ERROR_IS_LOCKED, "the Secret Service did not allow access to the item");
        return FALSE;
    }
    return TRUE;
}

/* The item's attribute `name`, copied (free with g_free); NULL if absent. */
static inline gchar *aa_secret_attribute(SecretItem *item, const char *name) {
    GHashTable *attributes = secret_item_get_attributes(item);
    gchar *value = attributes ? g_strdup(g_hash_table_lookup(attributes, name)) : NULL;
    if (attributes) g_hash_table_unref(attributes);
    return value;
}

/* Whether the item's attributes of our schema are `attributes` already: each of the schema's five present with the
 * same value or absent in both. Attributes outside the schema (the service's own, such as xdg:schema) are not ours. */
static inline gboolean aa_secret_has_attributes(SecretItem *item, GHashTable *attributes) {
    GHashTable *have = secret_item_get_attributes(item);
    if (have == NULL) return FALSE;
    gboolean same = TRUE;
    for (const SecretSchemaAttribute *a = aa_secret_schema()->attributes; a->name != NULL && same; a++) {
        const char *mine = g_hash_table_lookup(attributes, a->name), *theirs = g_hash_table_lookup(have, a->name);
        same = (mine == NULL || theirs == NULL) ? mine == theirs : strcmp(mine, theirs) == 0;
    }
    g_hash_table_unref(have);
    return same;
}

/* Returns 1 on success, 0 with *error set on failure. The key's item, if there is one, is updated in place: first
 * its secret (one SetSecret call, which is what makes refresh-token rotation atomic), then, when they differ, its
 * attributes to the key plus the dates given (valid_until/warned_at: decimal Unix seconds, NULL to leave out). Each
 * call has the keyring rewrite its file, so a rotation that keeps the dates costs one write, not two. A failure
 * between the two leaves the new secret with the old dates: the dates are advice, the secret is what must not be
 * lost. Without an item, one is created in the default collection with secret and attributes together. (Storing
 * with "replace" cannot update: the Secret Service replaces only an item that has every attribute of the new one,
 * and a changed date is a different attribute.) */
static inline int aa_secret_store(const char *account, const char *issuer, const char *client_id, const char *label,
                                  const char *secret, const char *valid_until, const char *warned_at,
                                  GCancellable *cancellable, GError **error) {
    SecretService *service = secret_service_get_sync(SECRET_SERVICE_OPEN_SESSION, cancellable, error);
    if (service == NULL) return 0;
    GHashTable *key = aa_secret_attributes(account, issuer, client_id);
    GError *failure = NULL;
    GList *items = aa_secret_search(service, key, SECRET_SEARCH_NONE, cancellable, &failure);
    g_hash_table_unref(key);
    if (failure != NULL) {
        g_propagate_error(error, failure);
        g_object_unref(service);
        return 0;
    }
    GHashTable *attributes = aa_secret_item_attributes(account, issuer, client_id, valid_until, warned_at);
    /* Copied into libsecret's non-pageable memory, wiped when freed. */
    SecretValue *value = secret_value_new(secret, -1, "text/plain");
    gboolean ok = TRUE;
    if (items == NULL) {
        /* CreateItem can answer with a prompt (aa_secret_wait_end). */
        AaSecretWait *wait = aa_secret_wait_begin();
        secret_service_store(service, aa_secret_schema(), attributes, SECRET_COLLECTION_DEFAULT, label, value,
                             cancellable, aa_secret_wait_done, wait);
        GAsyncResult *done = aa_secret_wait_end(wait, cancellable, error);
        ok = done != NULL && secret_service_store_finish(service, done, error);
        if (done != NULL) g_object_unref(done);
    }
    /* Every item of the key (there is one; were there more, all keep the same answer). */
    for (GList *item = items; item != NULL && ok; item = item->next) {
        ok = aa_secret_unlock_item(service, item->data, cancellable, error)
             && secret_item_set_secret_sync(item->data, value, cancellable, error)
             && (aa_secret_has_attributes(item->data, attributes)
                 || secret_item_set_attributes_sync(item->data, aa_secret_schema(), attributes, cancellable, error));
    }
    secret_value_unref(value);
    g_hash_table_unref(attributes);
    g_list_free_full(items, g_object_unref);
    g_object_unref(service);
    return ok ? 1 : 0;
}

/* The key's secret (free with aa_secret_free) and the item's dates: *valid_until and *warned_at are the attributes'
 * values (free with g_free), NULL when the item has none. One search, then one GetSecrets for the secret.
 * NULL with *error unset means "no such item" (or a locked collection, which hides its secrets: check
 * aa_secret_keyring_state); NULL with *error set on failure. */
static inline char *aa_secret_lookup_item(const char *account, const char *issuer, const char *client_id,
                                          gchar **valid_until, gchar **warned_at, GCancellable *cancellable,
                                          GError **error) {
    *valid_until = NULL;
    *warned_at = NULL;
    SecretService *service = secret_service_get_sync(SECRET_SERVICE_OPEN_SESSION, cancellable, error);
    if (service == NULL) return NULL;
    GHashTable *key = aa_secret_attributes(account, issuer, client_id);
    GError *failure = NULL;
    GList *items = aa_secret_search(service, key, SECRET_SEARCH_NONE, cancellable, &failure);
    g_hash_table_unref(key);
    /* The unlocked items' secrets, in one GetSecrets call. Not by searching with SECRET_SEARCH_LOAD_SECRETS, which
     * makes the same call without the cancellable and ignores its failure: a service that never answered it held
     * the store's queue for GDBus's 25 s and then read as "no such item". */
    if (failure == NULL && items != NULL) secret_item_load_secrets_sync(items, cancellable, &failure);
    if (failure != NULL) {
        g_propagate_error(error, failure);
        g_list_free_full(items, g_object_unref);
        g_object_unref(service);
        return NULL;
    }
    char *secret = NULL;
    for (GList *item = items; item != NULL && secret == NULL; item = item->next) {
        SecretValue *value = secret_item_get_secret(item->data);
        if (value == NULL && secret_item_get_locked(item->data)) {
            /* Locked to this client, so its secret was not loaded: ask (above), then load it. */
            if (!aa_secret_unlock_item(service, item->data, cancellable, error)
                || !secret_item_load_secret_sync(item->data, cancellable, error))
                break;
            value = secret_item_get_secret(item->data);
        }
        if (value == NULL) continue;
        /* Copied into libsecret's non-pageable memory (freed with aa_secret_free, which wipes it). */
        secret = secret_value_unref_to_password(value, NULL);
        *valid_until = aa_secret_attribute(item->data, AA_SECRET_VALID_UNTIL);
        *warned_at = aa_secret_attribute(item->data, AA_SECRET_WARNED_AT);
    }
    g_list_free_full(items, g_object_unref);
    g_object_unref(service);
    return secret;
}

static inline void aa_secret_string_free(gchar *string) { g_free(string); }

/* Returns 1 if an item was deleted, 0 if none or on error (*error set). */
static inline int aa_secret_clear(const char *account, const char *issuer, const char *client_id,
                                  GCancellable *cancellable, GError **error) {
    GHashTable *attributes = aa_secret_attributes(account, issuer, client_id);
    /* Delete can answer with a prompt (aa_secret_wait_end). */
    AaSecretWait *wait = aa_secret_wait_begin();
    secret_password_clearv(aa_secret_schema(), attributes, cancellable, aa_secret_wait_done, wait);
    g_hash_table_unref(attributes);
    GAsyncResult *done = aa_secret_wait_end(wait, cancellable, error);
    gboolean ok = done != NULL && secret_password_clear_finish(done, error);
    if (done != NULL) g_object_unref(done);
    return ok ? 1 : 0;
}

/* The keys (account, issuer, client_id) of every item of our schema that the service shows, read from the items'
 * attributes alone: no secret is loaded or sent over the bus. Returns a NULL-terminated array of strings, three per
 * item in that order (free with g_strfreev), or NULL with *error set. Items missing an attribute are skipped. What
 * a locked collection shows varies (gnome-keyring lists the items of a collection locked after use, attributes not
 * being secret), so only trust the answer when aa_secret_keyring_state says AVAILABLE. */
static inline gchar **aa_secret_stored_keys(GCancellable *cancellable, GError **error) {
    SecretService *service = secret_service_get_sync(SECRET_SERVICE_NONE, cancellable, error);
    if (service == NULL) return NULL;
    GHashTable *none = g_hash_table_new(g_str_hash, g_str_equal);
    GError *failure = NULL;
    GList *items = aa_secret_search(service, none, SECRET_SEARCH_NONE, cancellable, &failure);
    g_hash_table_unref(none);
    g_object_unref(service);
    if (failure != NULL) {
        g_propagate_error(error, failure);
        return NULL;
    }
    GPtrArray *keys = g_ptr_array_new();
    for (GList *item = items; item != NULL; item = item->next) {
        gchar *account = aa_secret_attribute(item->data, "account");
        gchar *issuer = aa_secret_attribute(item->data, "issuer");
        gchar *client_id = aa_secret_attribute(item->data, "client_id");
        if (account && issuer && client_id) {
            g_ptr_array_add(keys, account);
            g_ptr_array_add(keys, issuer);
            g_ptr_array_add(keys, client_id);
        } else {
            g_free(account);
            g_free(issuer);
            g_free(client_id);
        }
    }
    g_list_free_full(items, g_object_unref);
    g_ptr_array_add(keys, NULL);
    return (gchar **)g_ptr_array_free(keys, FALSE);
}

static inline void aa_secret_strings_free(gchar **strings) { g_strfreev(strings); }

/* Wipes and frees a secret returned by aa_secret_lookup_item. */
static inline void aa_secret_free(char *secret) { secret_password_free(secret); }

enum {
    AA_ERROR_OTHER = 0,
    AA_ERROR_CANCELLED = 1,
    AA_ERROR_LOCKED = 2,
    AA_ERROR_NO_SERVICE = 3,
    AA_ERROR_TIMED_OUT = 4,
};

static inline int aa_secret_error_kind(const GError *error) {
    if (error == NULL) return AA_ERROR_OTHER;
    if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED)) return AA_ERROR_CANCELLED;
    if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT)) return AA_ERROR_TIMED_OUT;
    if (g_error_matches(error, SECRET_ERROR, SECRET_ERROR_IS_LOCKED)) return AA_ERROR_LOCKED;
    if (error->domain == G_DBUS_ERROR) {
        switch (error->code) {
        case G_DBUS_ERROR_SERVICE_UNKNOWN:
        case G_DBUS_ERROR_NAME_HAS_NO_OWNER:
        case G_DBUS_ERROR_SPAWN_SERVICE_NOT_FOUND:
        case G_DBUS_ERROR_SPAWN_EXEC_FAILED:
        case G_DBUS_ERROR_NO_SERVER:
        case G_DBUS_ERROR_FILE_NOT_FOUND:
            return AA_ERROR_NO_SERVICE;
        default: break;
        }
    }
    /* No session bus to talk to: a dead address ("Could not connect: No such file or directory" / "Connection
     * refused"), a bus that went away ("The connection is closed"). Remote D-Bus errors never arrive in G_IO_ERROR
     * with these codes, so the codes alone are safe (the messages are translated). */
    if (error->domain == G_IO_ERROR &&
        (error->code == G_IO_ERROR_NOT_FOUND || error->code == G_IO_ERROR_CONNECTION_REFUSED ||
         error->code == G_IO_ERROR_CLOSED))
        return AA_ERROR_NO_SERVICE;
    /* No DBUS_SESSION_BUS_ADDRESS and no X display: "Cannot autolaunch D-Bus without X11 $DISPLAY". The name
     * and the variable names survive translation. */
    if (error->domain == G_IO_ERROR &&
        (error->code == G_IO_ERROR_DBUS_ERROR || error->code == G_IO_ERROR_FAILED)
        && error->message && (strstr(error->message, "org.freedesktop.secrets") ||
                              strstr(error->message, "DBUS_SESSION_BUS_ADDRESS") || strstr(error->message, "$DISPLAY")))
        return AA_ERROR_NO_SERVICE;
    /* "Cannot create an item in a locked collection" comes back as a plain D-Bus error. */
    if (error->message && strstr(error->message, "locked")) return AA_ERROR_LOCKED;
    return AA_ERROR_OTHER;
}

enum {
    AA_KEYRING_AVAILABLE = 0,
    AA_KEYRING_LOCKED = 1,
    AA_KEYRING_ABSENT = 2,
    AA_KEYRING_ERROR = 3,
    AA_KEYRING_NO_DEFAULT_COLLECTION = 4,
};

/* The default collection's state. A locked collection makes lookups return "nothing" without an error, so callers
 * must ask this before concluding that an item does not exist.
 * ABSENT: no session bus, or no Secret Service on it (*error usually set).
 * ERROR: any other failure (*error set, e.g. cancelled).
 * NO_DEFAULT_COLLECTION: the service answers but has no "default" alias (no login keyring yet).
 * Two small calls on the session bus that libsecret also uses: the alias's path (ReadAlias, "/" when there is none),
 * then that collection's Locked property. libsecret's collection proxy would fetch every property, the paths of all
 * the collection's items among them: a cost that grows with the user's whole login keyring (docs/BENCHMARKS.md). */
/* The Secret Service's changes, heard here and only here, on the session bus connection libsecret uses: its name
 * taking a new owner (a Secret Service that starts, KeePassXC quit and started again, a gnome-keyring-daemon restart)
 * and its objects' PropertiesChanged (a collection's `Locked`: an unlock). Each is told to the function
 * `aa_secret_watch` was given (the store's Swift side: sign-ins held in memory move into the keyring). A new owner
 * also drops libsecret's cached service: libsecret keeps one SecretService proxy for the process and sends to the
 * owner it knew when the proxy was made (it would learn of another only from signals dispatched by a GLib main loop,
 * which this program does not run), so every search would go to the old owner, and an item still there read as "no
 * sign-in". A filter sees the bus's messages in order on GDBus's own thread, so the change is noted before any reply
 * that came after it; the proxy is dropped by the next state check, on the store's serial queue, where libsecret's
 * calls run one at a time. */
typedef void (*aa_secret_changed_fn)(void *context);
typedef struct {
    aa_secret_changed_fn changed;
    void *context;
    gint owner_changed;
} AaSecretWatch;

/* Function-local, so that the one instance is shared by every file that includes this header. */
static inline AaSecretWatch *aa_secret_watching(void) {
    static AaSecretWatch watch;
    return &watch;
}

static inline GDBusMessage *aa_secret_filter(GDBusConnection *bus, GDBusMessage *message, gboolean incoming,
                                              gpointer unused) {
    if (!incoming || g_dbus_message_get_message_type(message) != G_DBUS_MESSAGE_TYPE_SIGNAL) return message;
    const gchar *member = g_dbus_message_get_member(message), *path = g_dbus_message_get_path(message);
    GVariant *body = g_dbus_message_get_body(message);
    gboolean changed = FALSE;
    /* Only the bus daemon's own NameOwnerChanged (no peer can send under its name). */
    if (g_strcmp0(member, "NameOwnerChanged") == 0 && g_strcmp0(path, "/org/freedesktop/DBus") == 0 && body != NULL
            && g_strcmp0(g_dbus_message_get_sender(message), "org.freedesktop.DBus") == 0
            && g_variant_is_of_type(body, G_VARIANT_TYPE("(sss)"))) {
        const gchar *name, *before, *after;
        g_variant_get(body, "(&s&s&s)", &name, &before, &after);
        if (strcmp(name, "org.freedesktop.secrets") == 0) {
            g_atomic_int_set(&aa_secret_watching()->owner_changed, 1);
            changed = after[0] != '\0';
        }
    } else if (g_strcmp0(member, "PropertiesChanged") == 0 && path != NULL
               && g_str_has_prefix(path, "/org/freedesktop/secrets")) {
        changed = TRUE;
    }
    aa_secret_changed_fn tell = g_atomic_pointer_get(&aa_secret_watching()->changed);
    if (changed && tell != NULL) tell(g_atomic_pointer_get(&aa_secret_watching()->context));
    return message;
}

/* Hears the Secret Service's changes on `bus` (once per connection: a new one, after the bus went away, gets the
 * filter and the match rules again). */
static inline void aa_secret_watch_bus(GDBusConnection *bus) {
    static GDBusConnection *watched = NULL;
    if (bus == watched) return;
    if (watched != NULL) g_object_unref(watched);
    watched = g_object_ref(bus);
    g_dbus_connection_add_filter(bus, aa_secret_filter, NULL, NULL);
    static const char *const rules[] = {
        "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',"
        "arg0='org.freedesktop.secrets'",
        "type='signal',sender='org.freedesktop.secrets',interface='org.freedesktop.DBus.Properties',"
        "member='PropertiesChanged'",
    };
    for (size_t i = 0; i < G_N_ELEMENTS(rules); i++)
        g_dbus_connection_call(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch",
                               g_variant_new("(s)", rules[i]), NULL, G_DBUS_CALL_FLAGS_NONE, -1, NULL, NULL, NULL);
    /* Whatever answered before the filter was there is asked again. */
    g_atomic_int_set(&aa_secret_watching()->owner_changed, 1);
}

/* Tells `changed` of every change from now on (runs on the store's serial queue). FALSE with *error set when there
 * is no session bus yet: the first state check that finds one starts hearing. */
static inline gboolean aa_secret_watch(aa_secret_changed_fn changed, void *context, GCancellable *cancellable,
                                       GError **error) {
    /* Read by the filter on GDBus's thread: the context is in place before the function that is given it. */
    g_atomic_pointer_set(&aa_secret_watching()->context, context);
    g_atomic_pointer_set(&aa_secret_watching()->changed, changed);
    GDBusConnection *bus = g_bus_get_sync(G_BUS_TYPE_SESSION, cancellable, error);
    if (bus == NULL) return FALSE;
    aa_secret_watch_bus(bus);
    g_object_unref(bus);
    return TRUE;
}

static inline int aa_secret_keyring_state(GCancellable *cancellable, GError **error) {
    /* Ask for the bus first: "no session bus" is then ABSENT whatever the (translated) message says. The
     * connection is the process-wide singleton that libsecret uses too. */
    GDBusConnection *bus = g_bus_get_sync(G_BUS_TYPE_SESSION, cancellable, error);
    if (bus == NULL)
        return (error && *error && aa_secret_error_kind(*error) == AA_ERROR_CANCELLED) ? AA_KEYRING_ERROR
                                                                                    : AA_KEYRING_ABSENT;
    int state = AA_KEYRING_ERROR;
    aa_secret_watch_bus(bus);
    if (g_atomic_int_compare_and_exchange(&aa_secret_watching()->owner_changed, 1, 0)) secret_service_disconnect();
    GVariant *alias = g_dbus_connection_call_sync(bus, "org.freedesktop.secrets", "/org/freedesktop/secrets",
                                                  "org.freedesktop.Secret.Service", "ReadAlias",
                                                  g_variant_new("(s)", SECRET_COLLECTION_DEFAULT), G_VARIANT_TYPE("(o)"),
                                                  G_DBUS_CALL_FLAGS_NONE, -1, cancellable, error);
    const gchar *path = NULL;
    if (alias != NULL) g_variant_get(alias, "(&o)", &path);
    if (path != NULL && strcmp(path, "/") == 0) {
        state = AA_KEYRING_NO_DEFAULT_COLLECTION;
    } else if (path != NULL) {
        GVariant *reply = g_dbus_connection_call_sync(bus, "org.freedesktop.secrets", path,
                                                      "org.freedesktop.DBus.Properties", "Get",
                                                      g_variant_new("(ss)", "org.freedesktop.Secret.Collection", "Locked"),
                                                      G_VARIANT_TYPE("(v)"), G_DBUS_CALL_FLAGS_NONE, -1, cancellable,
                                                      error);
        if (reply != NULL) {
            GVariant *locked = NULL;
            g_variant_get(reply, "(v)", &locked);
            if (g_variant_is_of_type(locked, G_VARIANT_TYPE_BOOLEAN))
                state = g_variant_get_boolean(locked) ? AA_KEYRING_LOCKED : AA_KEYRING_AVAILABLE;
            else
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                            "the Secret Service's default collection has no boolean Locked property");
            g_variant_unref(locked);
            g_variant_unref(reply);
        }
    }
    if (alias != NULL) g_variant_unref(alias);
    if (state == AA_KEYRING_ERROR && error && *error && aa_secret_error_kind(*error) == AA_ERROR_NO_SERVICE)
        state = AA_KEYRING_ABSENT;
    g_object_unref(bus);
    return state;
}

/* The program that owns org.freedesktop.secrets on the session bus, which is what answers every Secret Service
 * call (the GNOME keyring, KeePassXC, ...): the path of its executable (/proc/PID/exe), or its name
 * (/proc/PID/comm) when the executable cannot be read. Free with g_free. NULL with *error set when the bus or the
 * name's owner cannot be asked (no owner: G_DBUS_ERROR_NAME_HAS_NO_OWNER); NULL without an error when the owner's
 * process is not visible here (another PID namespace). Only the bus daemon is asked: the service is not called, so
 * this never starts a D-Bus-activatable one. */
static inline gchar *aa_secret_service_program(GCancellable *cancellable, GError **error) {
    GDBusConnection *bus = g_bus_get_sync(G_BUS_TYPE_SESSION, cancellable, error);
    if (bus == NULL) return NULL;
    GVariant *reply = g_dbus_connection_call_sync(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                  "org.freedesktop.DBus", "GetConnectionUnixProcessID",
                                                  g_variant_new("(s)", "org.freedesktop.secrets"),
                                                  G_VARIANT_TYPE("(u)"), G_DBUS_CALL_FLAGS_NONE, 5000, cancellable,
                                                  error);
    g_object_unref(bus);
    if (reply == NULL) return NULL;
    guint32 pid = 0;
    g_variant_get(reply, "(u)", &pid);
    g_variant_unref(reply);
    gchar path[64];
    g_snprintf(path, sizeof path, "/proc/%u/exe", pid);
    gchar *program = g_file_read_link(path, NULL);
    if (program != NULL) {
        /* An executable replaced by an upgrade reads as "/usr/bin/x (deleted)". */
        gchar *deleted = g_strrstr(program, " (deleted)");
        if (deleted != NULL && deleted[strlen(" (deleted)")] == '\0') *deleted = '\0';
        return program;
    }
    g_snprintf(path, sizeof path, "/proc/%u/comm", pid);
    if (!g_file_get_contents(path, &program, NULL, NULL)) return NULL;
    g_strchomp(program);
    return program;
}

static inline const char *aa_secret_error_message(const GError *error) { return error ? error->message : ""; }
static inline void aa_secret_error_free(GError *error) { if (error) g_error_free(error); }

#endif
