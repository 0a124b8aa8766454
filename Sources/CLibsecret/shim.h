/* A small, non-variadic C API over libsecret for Swift (which cannot call C-variadic functions).
 * Every symbol is prefixed aa_secret_. Errors come back as GError; aa_secret_error_kind() classifies them
 * because GLib's error-domain macros are function-like and do not import into Swift. */
#ifndef AUTH_AGENT_LIBSECRET_SHIM_H
#define AUTH_AGENT_LIBSECRET_SHIM_H

/* For secret-paths.h: the calls by D-Bus object path that aa_secret_store uses instead of SecretItem proxies.
 * libsecret asks its callers to acknowledge that this part of its API may change. */
#define SECRET_API_SUBJECT_TO_CHANGE
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

#define AA_SECRET_ITEM_INTERFACE "org.freedesktop.Secret.Item"

/* A method call to the Secret Service object at `path`, on the service's own connection (no proxy for the object:
 * a SecretItem proxy costs six calls to the bus daemon, for its match rules and the name's owner, and a GetAll). */
static inline GVariant *aa_secret_call(SecretService *service, const char *path, const char *interface,
                                       const char *method, GVariant *parameters, const GVariantType *reply,
                                       GCancellable *cancellable, GError **error) {
    GDBusProxy *proxy = G_DBUS_PROXY(service);
    GVariant *result = g_dbus_connection_call_sync(g_dbus_proxy_get_connection(proxy), g_dbus_proxy_get_name(proxy),
                                                   path, interface, method, parameters, reply,
                                                   G_DBUS_CALL_FLAGS_NONE, -1, cancellable, error);
    /* The message without GDBus's "GDBus.Error:<name>: " prefix, as libsecret's own calls give it (users read it);
     * the error's domain and code, which aa_secret_error_kind classifies, are unchanged. */
    if (result == NULL && error != NULL && *error != NULL) g_dbus_error_strip_remote_error(*error);
    return result;
}

/* A property of the Secret Service object at `path` (Properties.Get), or NULL with *error set. */
static inline GVariant *aa_secret_property(SecretService *service, const char *path, const char *interface,
                                           const char *name, GCancellable *cancellable, GError **error) {
    GVariant *reply = aa_secret_call(service, path, "org.freedesktop.DBus.Properties", "Get",
                                     g_variant_new("(ss)", interface, name), G_VARIANT_TYPE("(v)"), cancellable,
                                     error);
    if (reply == NULL) return NULL;
    GVariant *value = NULL;
    g_variant_get(reply, "(v)", &value);
    g_variant_unref(reply);
    return value;
}

/* The item's attribute `name` from its `Attributes` (an a{ss} from aa_secret_property), copied; NULL if absent. */
static inline gchar *aa_secret_attribute(GVariant *attributes, const char *name) {
    const char *value = NULL;
    if (attributes == NULL || !g_variant_is_of_type(attributes, G_VARIANT_TYPE("a{ss}"))) return NULL;
    return g_variant_lookup(attributes, name, "&s", &value) ? g_strdup(value) : NULL;
}

/* The item's `Attributes` (an a{ss}), or NULL with *error set. */
static inline GVariant *aa_secret_path_attributes(SecretService *service, const char *path, GCancellable *cancellable,
                                                  GError **error) {
    return aa_secret_property(service, path, AA_SECRET_ITEM_INTERFACE, "Attributes", cancellable, error);
}

/* The paths of our schema's items that carry `attributes`, unlocked ones first: one SearchItems. A NULL-terminated
 * array (free with g_strfreev), or NULL with *error set. */
static inline gchar **aa_secret_search_paths(SecretService *service, GHashTable *attributes, GCancellable *cancellable,
                                             GError **error) {
    gchar **unlocked = NULL, **locked = NULL;
    if (!secret_service_search_for_dbus_paths_sync(service, aa_secret_schema(), attributes, cancellable, &unlocked,
                                                   &locked, error))
        return NULL;
    GPtrArray *paths = g_ptr_array_new();
    for (gchar **path = unlocked; path != NULL && *path != NULL; path++) g_ptr_array_add(paths, *path);
    for (gchar **path = locked; path != NULL && *path != NULL; path++) g_ptr_array_add(paths, *path);
    g_ptr_array_add(paths, NULL);
    /* The strings now belong to `paths`. */
    g_free(unlocked);
    g_free(locked);
    return (gchar **)g_ptr_array_free(paths, FALSE);
}

/* Whether the item at `path` already carries exactly these dates (NULL: none): 1 or 0, or -1 with *error set. One
 * Properties.Get: a refresh that does not move the dates then costs no attribute write. */
static inline int aa_secret_path_has_dates(SecretService *service, const char *path, const char *valid_until,
                                           const char *warned_at, GCancellable *cancellable, GError **error) {
    GVariant *current = aa_secret_path_attributes(service, path, cancellable, error);
    if (current == NULL) return -1;
    gchar *until = aa_secret_attribute(current, AA_SECRET_VALID_UNTIL);
    gchar *warned = aa_secret_attribute(current, AA_SECRET_WARNED_AT);
    int same = g_strcmp0(until, valid_until) == 0 && g_strcmp0(warned, warned_at) == 0;
    g_free(until);
    g_free(warned);
    g_variant_unref(current);
    return same;
}

/* Sets the item's attributes to `attributes` plus the schema's name, as libsecret writes them on every item of a
 * named schema (its lookups match on `xdg:schema`). One Properties.Set. */
static inline int aa_secret_path_set_attributes(SecretService *service, const char *path, GHashTable *attributes,
                                                GCancellable *cancellable, GError **error) {
    GVariantBuilder builder;
    g_variant_builder_init(&builder, G_VARIANT_TYPE("a{ss}"));
    g_variant_builder_add(&builder, "{ss}", "xdg:schema", aa_secret_schema()->name);
    GHashTableIter iterator;
    gpointer name, value;
    g_hash_table_iter_init(&iterator, attributes);
    while (g_hash_table_iter_next(&iterator, &name, &value)) {
        g_variant_builder_add(&builder, "{ss}", (const char *)name, (const char *)value);
    }
    GVariant *reply = aa_secret_call(service, path, "org.freedesktop.DBus.Properties", "Set",
                                     g_variant_new("(ssv)", AA_SECRET_ITEM_INTERFACE, "Attributes",
                                                   g_variant_builder_end(&builder)),
                                     NULL, cancellable, error);
    if (reply == NULL) return 0;
    g_variant_unref(reply);
    return 1;
}

/* The item's secret, replaced in one SetSecret call (encrypted with the service's session, as libsecret sends every
 * secret). */
static inline int aa_secret_path_set_secret(SecretService *service, const char *path, SecretValue *value,
                                            GCancellable *cancellable, GError **error) {
    GVariant *reply = aa_secret_call(service, path, AA_SECRET_ITEM_INTERFACE, "SetSecret",
                                     g_variant_new("(@(oayays))", secret_service_encode_dbus_secret(service, value)),
                                     NULL, cancellable, error);
    if (reply == NULL) return 0;
    g_variant_unref(reply);
    return 1;
}

/* Returns 1 on success, 0 with *error set on failure. The key's item, if there is one, is updated in place: first
 * its secret (one SetSecret call, which is what makes refresh-token rotation atomic), then, if they differ, its
 * attributes to the key plus the dates given (valid_until/warned_at: decimal Unix seconds, NULL to leave out). A
 * failure between the two leaves the new secret with the old dates: the dates are advice, the secret is what must
 * not be lost. Without an item, one is created in the default collection with secret and attributes together.
 * (Creating with "replace" cannot update: the Secret Service replaces only an item that has every attribute of the
 * new one, and a changed date is a different attribute.) A refresh that moves no date: SearchItems, SetSecret and
 * one Properties.Get, all answered by the keyring. */
static inline int aa_secret_store(const char *account, const char *issuer, const char *client_id, const char *label,
                                  const char *secret, const char *valid_until, const char *warned_at,
                                  GCancellable *cancellable, GError **error) {
    SecretService *service = secret_service_get_sync(SECRET_SERVICE_NONE, cancellable, error);
    if (service == NULL) return 0;
    GHashTable *key = aa_secret_attributes(account, issuer, client_id);
    gchar **paths = aa_secret_search_paths(service, key, cancellable, error);
    g_hash_table_unref(key);
    if (paths == NULL) {
        g_object_unref(service);
        return 0;
    }
    GHashTable *attributes = aa_secret_item_attributes(account, issuer, client_id, valid_until, warned_at);
    /* Copied into libsecret's non-pageable memory, wiped when freed. */
    SecretValue *value = secret_value_new(secret, -1, "text/plain");
    gboolean ok = paths[0] != NULL ? secret_service_ensure_session_sync(service, cancellable, error)
                        : secret_service_store_sync(service, aa_secret_schema(), attributes, SECRET_COLLECTION_DEFAULT,
                                                    label, value, cancellable, error);
    /* Every item of the key (there is one; were there more, all keep the same answer). A locked one refuses
     * SetSecret with IsLocked, reported as the keyring being locked. */
    for (gchar **path = paths; *path != NULL && ok; path++) {
        ok = aa_secret_path_set_secret(service, *path, value, cancellable, error);
        int same = ok ? aa_secret_path_has_dates(service, *path, valid_until, warned_at, cancellable, error) : -1;
        ok = same == 1 || (same == 0 && aa_secret_path_set_attributes(service, *path, attributes, cancellable, error));
    }
    secret_value_unref(value);
    g_hash_table_unref(attributes);
    g_strfreev(paths);
    g_object_unref(service);
    return ok ? 1 : 0;
}

/* Returns the secret (free with aa_secret_free) or NULL; NULL with *error unset means "no such item" (or a locked
 * collection, which hides its items: check aa_secret_keyring_state). */
static inline char *aa_secret_lookup(const char *account, const char *issuer, const char *client_id,
                                     GCancellable *cancellable, GError **error) {
    GHashTable *attributes = aa_secret_attributes(account, issuer, client_id);
    gchar *secret = secret_password_lookupv_sync(aa_secret_schema(), attributes, cancellable, error);
    g_hash_table_unref(attributes);
    return secret;
}

/* aa_secret_lookup, and the item's dates: *valid_until and *warned_at are the attributes' values (free with g_free),
 * NULL when the item has none or there is no item. NULL with *error set if the attributes could not be read. */
static inline char *aa_secret_lookup_item(const char *account, const char *issuer, const char *client_id,
                                          gchar **valid_until, gchar **warned_at, GCancellable *cancellable,
                                          GError **error) {
    *valid_until = NULL;
    *warned_at = NULL;
    char *secret = aa_secret_lookup(account, issuer, client_id, cancellable, error);
    if (secret == NULL) return NULL;
    /* Attributes only: no second copy of the secret crosses the bus. */
    SecretService *service = secret_service_get_sync(SECRET_SERVICE_NONE, cancellable, error);
    GHashTable *key = aa_secret_attributes(account, issuer, client_id);
    gchar **paths = service ? aa_secret_search_paths(service, key, cancellable, error) : NULL;
    g_hash_table_unref(key);
    GVariant *found = paths && paths[0] ? aa_secret_path_attributes(service, paths[0], cancellable, error) : NULL;
    if (paths == NULL || (paths[0] != NULL && found == NULL)) {
        secret_password_free(secret);
        secret = NULL;
    } else if (found != NULL) {
        *valid_until = aa_secret_attribute(found, AA_SECRET_VALID_UNTIL);
        *warned_at = aa_secret_attribute(found, AA_SECRET_WARNED_AT);
        g_variant_unref(found);
    }
    g_strfreev(paths);
    if (service) g_object_unref(service);
    return secret;
}

static inline void aa_secret_string_free(gchar *string) { g_free(string); }

/* Returns 1 if an item was deleted, 0 if none or on error (*error set). */
static inline int aa_secret_clear(const char *account, const char *issuer, const char *client_id,
                                  GCancellable *cancellable, GError **error) {
    GHashTable *attributes = aa_secret_attributes(account, issuer, client_id);
    gboolean ok = secret_password_clearv_sync(aa_secret_schema(), attributes, cancellable, error);
    g_hash_table_unref(attributes);
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
    gchar **paths = aa_secret_search_paths(service, none, cancellable, error);
    g_hash_table_unref(none);
    /* The strings are the array's until it is returned: a failed read part-way frees those already taken. */
    GPtrArray *keys = paths ? g_ptr_array_new_with_free_func(g_free) : NULL;
    for (gchar **path = paths; keys != NULL && *path != NULL; path++) {
        GVariant *found = aa_secret_path_attributes(service, *path, cancellable, error);
        if (found == NULL) {
            g_ptr_array_free(keys, TRUE);
            keys = NULL;
            break;
        }
        gchar *account = aa_secret_attribute(found, "account");
        gchar *issuer = aa_secret_attribute(found, "issuer");
        gchar *client_id = aa_secret_attribute(found, "client_id");
        if (account && issuer && client_id) {
            g_ptr_array_add(keys, account);
            g_ptr_array_add(keys, issuer);
            g_ptr_array_add(keys, client_id);
        } else {
            g_free(account);
            g_free(issuer);
            g_free(client_id);
        }
        g_variant_unref(found);
    }
    g_strfreev(paths);
    g_object_unref(service);
    if (keys == NULL) return NULL;
    g_ptr_array_add(keys, NULL);
    return (gchar **)g_ptr_array_free(keys, FALSE);
}

static inline void aa_secret_strings_free(gchar **strings) { g_strfreev(strings); }

/* Wipes and frees a secret returned by aa_secret_lookup. */
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
 * ABSENT: no session bus, or no Secret Service on it (*error usually set). A missing service can show up at
 * either libsecret call: secret_service_get_sync only builds a proxy, so it often fails only at the alias lookup.
 * ERROR: any other failure (*error set, e.g. cancelled), or NULL with no GError, which libsecret does return.
 * NO_DEFAULT_COLLECTION: the service answers but has no "default" alias (no login keyring yet). */
static inline int aa_secret_keyring_state(GCancellable *cancellable, GError **error) {
    /* Ask for the bus first: "no session bus" is then ABSENT whatever the (translated) message says. The
     * connection is the process-wide singleton that libsecret uses too. */
    GDBusConnection *bus = g_bus_get_sync(G_BUS_TYPE_SESSION, cancellable, error);
    if (bus == NULL)
        return (error && *error && aa_secret_error_kind(*error) == AA_ERROR_CANCELLED) ? AA_KEYRING_ERROR
                                                                                    : AA_KEYRING_ABSENT;
    g_object_unref(bus);
    SecretService *service = secret_service_get_sync(SECRET_SERVICE_NONE, cancellable, error);
    if (service == NULL)
        return (error && *error && aa_secret_error_kind(*error) == AA_ERROR_NO_SERVICE) ? AA_KEYRING_ABSENT
                                                                                     : AA_KEYRING_ERROR;
    /* The alias and the collection's Locked property by path: a SecretCollection proxy would cost six calls to the
     * bus daemon and a GetAll besides. */
    gchar *collection = secret_service_read_alias_dbus_path_sync(service, SECRET_COLLECTION_DEFAULT, cancellable, error);
    GVariant *locked = collection ? aa_secret_property(service, collection, "org.freedesktop.Secret.Collection",
                                                       "Locked", cancellable, error) : NULL;
    int state;
    if (locked != NULL && g_variant_is_of_type(locked, G_VARIANT_TYPE_BOOLEAN)) {
        state = g_variant_get_boolean(locked) ? AA_KEYRING_LOCKED : AA_KEYRING_AVAILABLE;
    } else if (error && *error) {
        state = aa_secret_error_kind(*error) == AA_ERROR_NO_SERVICE ? AA_KEYRING_ABSENT : AA_KEYRING_ERROR;
    } else {
        state = collection == NULL ? AA_KEYRING_NO_DEFAULT_COLLECTION : AA_KEYRING_ERROR;
    }
    if (locked) g_variant_unref(locked);
    g_free(collection);
    g_object_unref(service);
    return state;
}

static inline const char *aa_secret_error_message(const GError *error) { return error ? error->message : ""; }
static inline void aa_secret_error_free(GError *error) { if (error) g_error_free(error); }

#endif
