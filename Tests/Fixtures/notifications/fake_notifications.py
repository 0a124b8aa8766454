#!/usr/bin/python3
"""A fake desktop notification server for the e2e tests: owns org.freedesktop.Notifications on the bus in
$DBUS_SESSION_BUS_ADDRESS, advertises the capabilities in argv[2] (comma separated), appends every Notify call as
one JSON line to the file argv[1], emits ActionInvoked(id, key) when the test calls its extra method
dev.authagent.Test.Invoke(u id, s key) (that is what a click on the notification's button does), and
NotificationClosed(id, reason) on CloseNotification (reason 3) or dev.authagent.Test.Dismiss(u id) (reason 2).
Needs Debian's python3-dbus and python3-gi (see scripts/setup)."""
import json
import sys

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

PATH = "/org/freedesktop/Notifications"
IFACE = "org.freedesktop.Notifications"


class Server(dbus.service.Object):
    def __init__(self, bus, log_path, capabilities):
        super().__init__(bus, PATH)
        self.log_path = log_path
        self.capabilities = capabilities
        self.next_id = 0

    @dbus.service.method(IFACE, in_signature="", out_signature="as")
    def GetCapabilities(self):
        return self.capabilities

    @dbus.service.method(IFACE, in_signature="susssasa{sv}i", out_signature="u")
    def Notify(self, app_name, replaces_id, app_icon, summary, body, actions, hints, expire_timeout):
        if replaces_id:
            id = int(replaces_id)
        else:
            self.next_id += 1
            id = self.next_id
        entry = {"id": id, "app_name": str(app_name), "summary": str(summary), "body": str(body),
                 "actions": [str(a) for a in actions]}
        if replaces_id:
            entry["replaces_id"] = int(replaces_id)
        if "urgency" in hints:
            entry["urgency"] = int(hints["urgency"])
        with open(self.log_path, "a") as log:
            log.write(json.dumps(entry) + "\n")
        return dbus.UInt32(id)

    @dbus.service.method(IFACE, in_signature="u", out_signature="")
    def CloseNotification(self, id):
        with open(self.log_path, "a") as log:
            log.write(json.dumps({"closed": int(id)}) + "\n")
        self.NotificationClosed(id, 3)

    @dbus.service.method(IFACE, in_signature="", out_signature="ssss")
    def GetServerInformation(self):
        return ("fake", "auth-agent tests", "1", "1.2")

    @dbus.service.signal(IFACE, signature="us")
    def ActionInvoked(self, id, key):
        pass

    @dbus.service.signal(IFACE, signature="uu")
    def NotificationClosed(self, id, reason):
        pass

    @dbus.service.method("dev.authagent.Test", in_signature="u", out_signature="")
    def Dismiss(self, id):
        self.NotificationClosed(id, 2)

    @dbus.service.method("dev.authagent.Test", in_signature="us", out_signature="")
    def Invoke(self, id, key):
        self.ActionInvoked(id, key)


def main():
    DBusGMainLoop(set_as_default=True)
    bus = dbus.SessionBus()
    server = Server(bus, sys.argv[1], [c for c in sys.argv[2].split(",") if c])
    name = dbus.service.BusName(IFACE, bus, do_not_queue=True)  # noqa: F841 (keeps the name)
    print("ready", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
