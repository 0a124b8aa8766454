#!/usr/bin/python3
"""A fake logind and a fake NetworkManager for the e2e tests, on the bus in $DBUS_SYSTEM_BUS_ADDRESS (a private
dbus-daemon standing in for the system bus). It owns org.freedesktop.login1 and, unless argv[1] is "no-nm",
org.freedesktop.NetworkManager, and emits their signals when the test calls its extra method:
  dev.authagent.Test.Emit("sleep", 1|0)   -> org.freedesktop.login1.Manager.PrepareForSleep(b)
  dev.authagent.Test.Emit("network", N)   -> org.freedesktop.NetworkManager.StateChanged(u N)
  dev.authagent.Test.Emit("lock", 1|0)    -> the display session's LockedHint, with PropertiesChanged
logind's user object of this process's uid has a `Display` session whose `LockedHint` starts false (what a
locker that sets the hint, GNOME's or KDE's, changes through SetLockedHint).
The signals come from the well-known names' owner, as the real services' do. Needs python3-dbus and python3-gi."""
import sys

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

LOGIN1 = ("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager")
NM = ("org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager", "org.freedesktop.NetworkManager")


class Login1(dbus.service.Object):
    def __init__(self, bus):
        super().__init__(bus, LOGIN1[1])

    @dbus.service.signal(LOGIN1[2], signature="b")
    def PrepareForSleep(self, start):
        pass

    @dbus.service.method("dev.authagent.Test", in_signature="si", out_signature="")
    def Emit(self, what, value):
        if what == "sleep":
            self.PrepareForSleep(dbus.Boolean(bool(value)))
        elif what == "network":
            if network is None:
                raise dbus.exceptions.DBusException("no fake NetworkManager in this run")
            network.StateChanged(dbus.UInt32(value))
        elif what == "lock":
            session.set_locked(bool(value))
        else:
            raise dbus.exceptions.DBusException(f"unknown signal {what}")


PROPERTIES = "org.freedesktop.DBus.Properties"
SESSION_PATH = "/org/freedesktop/login1/session/_31"


class User(dbus.service.Object):
    """org.freedesktop.login1.User of our uid: its Display session."""

    def __init__(self, bus):
        super().__init__(bus, f"/org/freedesktop/login1/user/_{__import__('os').getuid()}")

    @dbus.service.method(PROPERTIES, in_signature="ss", out_signature="v")
    def Get(self, interface, name):
        if interface == "org.freedesktop.login1.User" and name == "Display":
            return dbus.Struct(("31", dbus.ObjectPath(SESSION_PATH)), signature="so")
        raise dbus.exceptions.DBusException("org.freedesktop.DBus.Error.UnknownProperty", name)


class Session(dbus.service.Object):
    """The display session: its LockedHint."""

    def __init__(self, bus):
        super().__init__(bus, SESSION_PATH)
        self.locked = False

    @dbus.service.method(PROPERTIES, in_signature="ss", out_signature="v")
    def Get(self, interface, name):
        if interface == "org.freedesktop.login1.Session" and name == "LockedHint":
            return dbus.Boolean(self.locked)
        raise dbus.exceptions.DBusException("org.freedesktop.DBus.Error.UnknownProperty", name)

    @dbus.service.signal(PROPERTIES, signature="sa{sv}as")
    def PropertiesChanged(self, interface, changed, invalidated):
        pass

    def set_locked(self, locked: bool):
        self.locked = locked
        self.PropertiesChanged("org.freedesktop.login1.Session", {"LockedHint": dbus.Boolean(locked)}, [])


session = None


class NetworkManager(dbus.service.Object):
    def __init__(self, bus):
        super().__init__(bus, NM[1])

    @dbus.service.signal(NM[2], signature="u")
    def StateChanged(self, state):
        pass


network = None


def main():
    global network, session
    DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(__import__("os").environ["DBUS_SYSTEM_BUS_ADDRESS"])
    Login1(bus)
    User(bus)
    session = Session(bus)
    names = [dbus.service.BusName(LOGIN1[0], bus, do_not_queue=True)]
    if sys.argv[1:2] != ["no-nm"]:
        network = NetworkManager(bus)
        names.append(dbus.service.BusName(NM[0], bus, do_not_queue=True))
    print("ready", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
