#!/usr/bin/python3
"""A fake Secret Service (org.freedesktop.secrets) that stalls where a real one might, for the keyring deadline tests
(Tests/KeyringStoreTests/KeyringIsolatedBusTests.swift):

    fake_secret_service.py LOG -- COMMAND [ARGS...]

It owns org.freedesktop.secrets on the bus in $DBUS_SESSION_BUS_ADDRESS, then runs COMMAND and exits with its status
(COMMAND is killed after 120 s). Just enough of the API for the agent's calls through libsecret: a plain session,
the unlocked `login` collection as the `default` alias, and one item for any search that names an `account`, whose
behaviour the account's first word chooses:
  stuck-...    GetSecrets for it is never answered (a service stalled mid-read);
  locked-...   the item is locked to this client, and Unlock answers with a stalled prompt;
  confirm-...  Delete answers with a stalled prompt (as KeePassXC asks before a client deletes an entry);
  new-...      a search finds nothing, and CreateItem answers with a stalled prompt;
  other        GetSecrets answers "secret-of-ACCOUNT", and Delete deletes.
A stalled prompt answers Prompt (the dialog is showing), never completes, and never answers Dismiss. Each method
call is appended to LOG as one line, "METHOD ACCOUNT..." (no secrets). A search without an account finds nothing.
Needs python3-dbus and python3-gi."""
import itertools
import os
import subprocess
import sys

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

NAME = "org.freedesktop.secrets"
ROOT = "/org/freedesktop/secrets"
COLLECTION = ROOT + "/collection/login"
SERVICE_IFACE = "org.freedesktop.Secret.Service"
COLLECTION_IFACE = "org.freedesktop.Secret.Collection"
ITEM_IFACE = "org.freedesktop.Secret.Item"
PROMPT_IFACE = "org.freedesktop.Secret.Prompt"
PROPERTIES_IFACE = "org.freedesktop.DBus.Properties"


class NotSupported(dbus.DBusException):
    _dbus_error_name = "org.freedesktop.DBus.Error.NotSupported"


class NoSuchObject(dbus.DBusException):
    _dbus_error_name = "org.freedesktop.Secret.Error.NoSuchObject"


def log(line):
    with open(LOG, "a") as out:
        out.write(line + "\n")


class Properties(dbus.service.Object):
    """org.freedesktop.DBus.Properties over `self.properties()`: {interface: {name: value}}."""

    @dbus.service.method(PROPERTIES_IFACE, in_signature="ss", out_signature="v")
    def Get(self, interface, name):
        return self.properties()[interface][name]

    @dbus.service.method(PROPERTIES_IFACE, in_signature="s", out_signature="a{sv}")
    def GetAll(self, interface):
        return self.properties().get(interface, {})


class Item(Properties):
    def __init__(self, bus, path, attributes):
        super().__init__(bus, path)
        self.path = path
        self.attributes = attributes
        self.account = attributes["account"]
        self.locked = self.account.startswith("locked-")

    def properties(self):
        return {ITEM_IFACE: {
            "Locked": dbus.Boolean(self.locked),
            "Attributes": dbus.Dictionary(self.attributes, signature="ss"),
            "Label": dbus.String("auth-agent test item"),
            "Created": dbus.UInt64(0),
            "Modified": dbus.UInt64(0),
        }}

    @dbus.service.method(ITEM_IFACE, in_signature="", out_signature="o")
    def Delete(self):
        log(f"Delete {self.account}")
        if self.account.startswith("confirm-"):
            return new_prompt(self.connection)
        del items[self.path]
        self.remove_from_connection()
        return dbus.ObjectPath("/")


class Collection(Properties):
    def properties(self):
        return {COLLECTION_IFACE: {
            "Items": dbus.Array(sorted(items), signature="o"),
            "Label": dbus.String("Login"),
            "Locked": dbus.Boolean(False),
            "Created": dbus.UInt64(0),
            "Modified": dbus.UInt64(0),
        }}

    @dbus.service.method(COLLECTION_IFACE, in_signature="a{sv}(oayays)b", out_signature="oo")
    def CreateItem(self, properties, secret, replace):
        account = str(properties.get(ITEM_IFACE + ".Attributes", {}).get("account", ""))
        log(f"CreateItem {account}")
        if not account.startswith("new-"):
            raise dbus.DBusException("the fake creates no items")
        return dbus.ObjectPath("/"), new_prompt(self.connection)


class Prompt(dbus.service.Object):
    """Answers Prompt (the dialog is "showing"), never completes, never answers Dismiss."""

    stalled = []

    @dbus.service.method(PROMPT_IFACE, in_signature="s", out_signature="")
    def Prompt(self, window_id):
        log("Prompt")

    @dbus.service.method(PROMPT_IFACE, in_signature="", out_signature="", async_callbacks=("reply", "fail"))
    def Dismiss(self, reply, fail):
        log("Dismiss")
        Prompt.stalled.append(reply)  # kept, never called


items = {}
prompts = []
serial = itertools.count(1)


def new_prompt(bus):
    path = f"{ROOT}/prompt/p{len(prompts) + 1}"
    prompts.append(Prompt(bus, path))
    return dbus.ObjectPath(path)


class Service(Properties):
    def __init__(self, bus):
        super().__init__(bus, ROOT)
        self.bus = bus
        self.sessions = 0
        self.stalled = []

    def properties(self):
        return {SERVICE_IFACE: {"Collections": dbus.Array([dbus.ObjectPath(COLLECTION)], signature="o")}}

    @dbus.service.method(SERVICE_IFACE, in_signature="sv", out_signature="vo")
    def OpenSession(self, algorithm, parameters):
        log(f"OpenSession {algorithm}")
        if algorithm != "plain":
            raise NotSupported(f"{algorithm} is not supported by the fake")
        self.sessions += 1
        return dbus.String("", variant_level=1), dbus.ObjectPath(f"{ROOT}/session/s{self.sessions}")

    @dbus.service.method(SERVICE_IFACE, in_signature="s", out_signature="o")
    def ReadAlias(self, name):
        log(f"ReadAlias {name}")
        return dbus.ObjectPath(COLLECTION if name == "default" else "/")

    @dbus.service.method(SERVICE_IFACE, in_signature="a{ss}", out_signature="aoao")
    def SearchItems(self, attributes):
        account = attributes.get("account")
        log(f"SearchItems {account}")
        if account is None or account.startswith("new-"):
            return dbus.Array([], signature="o"), dbus.Array([], signature="o")
        path = f"{COLLECTION}/i{next(serial)}"
        for known in items.values():
            if known.account == account:
                path = known.path
        if path not in items:
            items[path] = Item(self.bus, path, {str(k): str(v) for k, v in attributes.items()})
        item = items[path]
        found = dbus.Array([dbus.ObjectPath(path)], signature="o")
        empty = dbus.Array([], signature="o")
        return (empty, found) if item.locked else (found, empty)

    @dbus.service.method(SERVICE_IFACE, in_signature="aoo", out_signature="a{o(oayays)}",
                         async_callbacks=("reply", "fail"))
    def GetSecrets(self, paths, session, reply, fail):
        wanted = [items[str(p)] for p in paths if str(p) in items]
        log("GetSecrets " + " ".join(item.account for item in wanted))
        if any(item.account.startswith("stuck-") for item in wanted):
            self.stalled.append(reply)  # kept, never called
            return
        secrets = {}
        for item in wanted:
            if item.locked:
                continue
            value = dbus.Array(f"secret-of-{item.account}".encode(), signature="y")
            secrets[dbus.ObjectPath(item.path)] = dbus.Struct(
                (session, dbus.Array(b"", signature="y"), value, dbus.String("text/plain")), signature="oayays")
        reply(dbus.Dictionary(secrets, signature="o(oayays)"))

    @dbus.service.method(SERVICE_IFACE, in_signature="ao", out_signature="aoo")
    def Unlock(self, paths):
        log("Unlock " + " ".join(items[str(p)].account for p in paths if str(p) in items))
        return dbus.Array([], signature="o"), new_prompt(self.bus)


def main():
    global LOG
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: fake_secret_service.py LOG -- COMMAND [ARGS...]")
    LOG = sys.argv[1]
    DBusGMainLoop(set_as_default=True)
    bus = dbus.SessionBus()
    Service(bus)
    Collection(bus, COLLECTION)
    Collection(bus, ROOT + "/aliases/default")
    name = dbus.service.BusName(NAME, bus, do_not_queue=True)  # noqa: F841 (keeps the name)
    child = subprocess.Popen(sys.argv[3:])
    loop = GLib.MainLoop()
    status = []

    def exited(pid, wait_status):
        status.append(wait_status)
        loop.quit()

    GLib.child_watch_add(GLib.PRIORITY_DEFAULT, child.pid, exited)
    GLib.timeout_add_seconds(120, lambda: child.kill() or False)
    loop.run()
    code = os.waitstatus_to_exitcode(status[0])
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
