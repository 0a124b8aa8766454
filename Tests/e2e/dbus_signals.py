"""A listener of the agent's D-Bus signals as docs/DBUS.md describes one: on one connection it matches
`AccountChanged` and `SignInRequired` from dev.authagent.Agent, calls `Subscribe`, prints `name UNIQUE-NAME` and
`subscribed`, then one line per signal (`MEMBER ACCOUNT`). It runs with Debian's python3 and python3-gi, on the host or inside a sandbox (whose
/usr is the host's)."""
import contextlib
import os
import select
import subprocess
import time

LISTENER = r"""
from gi.repository import Gio, GLib

NAME, PATH, IFACE = "dev.authagent.Agent", "/dev/authagent/Agent1", "dev.authagent.Agent1"
bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)


def on_signal(connection, sender, path, interface, member, parameters):
    print(member, parameters.unpack()[0], flush=True)


bus.signal_subscribe(NAME, IFACE, None, PATH, None, Gio.DBusSignalFlags.NONE, on_signal)
bus.call_sync(NAME, PATH, IFACE, "Subscribe", None, None, Gio.DBusCallFlags.NONE, 60000, None)
print("name", bus.get_unique_name(), flush=True)
print("subscribed", flush=True)
GLib.MainLoop().run()
"""

ARGV = ["/usr/bin/python3", "-c", LISTENER]


class Listener:
    """The listener's process and what it printed so far."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.text = ""

    def wait_for(self, line: str, timeout: float = 20, count: int = 1) -> list[str]:
        """Reads until `line` was printed (`count` times); returns every line printed so far."""
        deadline = time.monotonic() + timeout
        while self.text.splitlines().count(line) < count:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out after {timeout} s waiting for {line!r}; got: {self.text!r}"
            ready, _, _ = select.select([self.proc.stdout], [], [], remaining)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                assert chunk, f"the listener ended before {line!r}: {self.text!r} {self.proc.stderr.read()!r}"
                self.text += chunk.decode(errors="replace")
        return [line for line in self.text.splitlines() if not line.startswith("name ")]

    @property
    def unique_name(self) -> str:
        """The listener's unique name on the bus (printed before `subscribed`)."""
        self.wait_for("subscribed")
        return next(line.split()[1] for line in self.text.splitlines() if line.startswith("name "))


FORGER = r"""
import sys
from gi.repository import Gio, GLib

bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)
agent = bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetNameOwner",
                      GLib.Variant("(s)", ("dev.authagent.Agent",)), None, Gio.DBusCallFlags.NONE, 10000, None).unpack()[0]
victim = sys.argv[1]
bus.emit_signal(agent, "/org/freedesktop/DBus", "org.freedesktop.DBus", "NameOwnerChanged",
                GLib.Variant("(sss)", (victim, victim, "")))
bus.flush_sync(None)
print("sent", flush=True)
"""


def forge_name_owner_changed(env: dict, victim: str) -> None:
    """Any peer on the bus sends the agent's connection a NameOwnerChanged saying `victim` left the bus."""
    sent = subprocess.run(["/usr/bin/python3", "-c", FORGER, victim], env=env, capture_output=True, text=True, timeout=30)
    assert sent.returncode == 0 and "sent" in sent.stdout, sent.stderr


@contextlib.contextmanager
def listening(proc: subprocess.Popen):
    """A started listener process (the argv above, maybe wrapped): waits until it subscribed, stops it after."""
    listener = Listener(proc)
    try:
        listener.wait_for("subscribed", 30)
        yield listener
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
