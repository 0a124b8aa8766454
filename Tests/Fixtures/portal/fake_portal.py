#!/usr/bin/python3
"""A fake xdg-desktop-portal for the e2e tests: owns org.freedesktop.portal.Desktop on the bus in
$DBUS_SESSION_BUS_ADDRESS and serves org.freedesktop.portal.OpenURI.OpenURI(s parent_window, s uri, a{sv} options)
-> o handle at /org/freedesktop/portal/desktop. Every call is appended as one JSON line to the file argv[1]. With
argv[2] == "browse" it then does what the real portal does through the desktop: starts the browser on the URI (here
the fixture's scripted browser, $FAKE_BROWSER, as a process of its own, not a child of the agent) and emits the
request's org.freedesktop.portal.Request.Response(0); with "dismiss" it accepts the request, starts nothing and
emits Response(1), as when the person closes the application chooser; with "error" it answers
org.freedesktop.portal.Error.Failed instead, and starts nothing. The request handle follows the real portal's rule:
/org/freedesktop/portal/desktop/request/SENDER/TOKEN with the options' handle_token.
Needs Debian's python3-dbus and python3-gi (see scripts/setup)."""
import json
import os
import subprocess
import sys

import dbus
import dbus.lowlevel
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

NAME = "org.freedesktop.portal.Desktop"
PATH = "/org/freedesktop/portal/desktop"
IFACE = "org.freedesktop.portal.OpenURI"


class PortalFailed(dbus.DBusException):
    _dbus_error_name = "org.freedesktop.portal.Error.Failed"


class Portal(dbus.service.Object):
    def __init__(self, bus, log_path, mode):
        super().__init__(bus, PATH)
        self.log_path = log_path
        self.mode = mode
        self.calls = 0

    @dbus.service.method(IFACE, in_signature="ssa{sv}", out_signature="o", sender_keyword="sender")
    def OpenURI(self, parent_window, uri, options, sender=None):
        self.calls += 1
        with open(self.log_path, "a") as log:
            log.write(json.dumps({"parent_window": str(parent_window), "uri": str(uri),
                                  "options": sorted(str(k) for k in options), "mode": self.mode}) + "\n")
        if self.mode == "error":
            raise PortalFailed("no application can open this URI (fake portal)")
        token = str(options.get("handle_token", f"fake{self.calls}"))
        handle = f"/org/freedesktop/portal/desktop/request/{sender[1:].replace('.', '_')}/{token}"
        if self.mode == "browse":
            subprocess.Popen([os.environ["FAKE_BROWSER"], str(uri)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        # After the reply, as the real portal does once the chooser (or the launch) is done.
        GLib.idle_add(self.respond, handle, 0 if self.mode == "browse" else 1)
        return dbus.ObjectPath(handle)

    def respond(self, handle, code):
        signal = dbus.lowlevel.SignalMessage(handle, "org.freedesktop.portal.Request", "Response")
        signal.append(dbus.UInt32(code), dbus.Dictionary({}, signature="sv"))
        self.connection.send_message(signal)
        return False

    @dbus.service.method(IFACE, in_signature="sha{sv}", out_signature="o")
    def OpenFile(self, parent_window, fd, options):
        raise PortalFailed("not implemented by the fake portal")


def main():
    DBusGMainLoop(set_as_default=True)
    bus = dbus.SessionBus()
    portal = Portal(bus, sys.argv[1], sys.argv[2])  # noqa: F841 (exported on the bus)
    name = dbus.service.BusName(NAME, bus, do_not_queue=True)  # noqa: F841 (keeps the name)
    print("ready", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
