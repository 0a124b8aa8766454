"""A real KeePassXC as the Secret Service on a private session bus, headless (Xvfb), for Tests/e2e/test_keepassxc.py.

The database is made the way a user's would be exposed to the Secret Service: KeePass 2 XML whose custom data item
FDO_SECRETS_EXPOSED_GROUP names the root group, imported with `keepassxc-cli import`; a database made by
`keepassxc-cli db-create` exposes nothing. The bus has no service files, so nothing else (Debian's D-Bus-activatable
gnome-keyring) can take org.freedesktop.secrets first. HOME, XDG_RUNTIME_DIR and TMPDIR are the fixture's own:
KeePassXC's single-instance lock and socket live in TMPDIR (/tmp/keepassxc.lock when unset), and a KeePassXC started
by a test running beside this one would otherwise hand its database to this one and exit.
"""
from __future__ import annotations

import base64
import os
import subprocess
import time
import uuid
from pathlib import Path

from conftest import SYSTEM_PATH, Keyring, kill_pid, pid_alive, wait_for

DATABASE_PASSWORD = "e2e-keepassxc-password"
COLLECTION = "/org/freedesktop/secrets/collection/passwords"  # KeePassXC names it after the file

CONFIG = """[General]
AutoSaveAfterEveryChange=true
ConfigVersion=2

[FdoSecrets]
Enabled=true
ConfirmAccessItem={confirm}
ConfirmDeleteItem=false
ShowNotification=false
"""

# Reads the password from stdin, so that it is in no process's argv.
OPEN_DATABASE = """
import sys, dbus
bus = dbus.bus.BusConnection(sys.argv[1])
window = bus.get_object("org.keepassxc.KeePassXC.MainWindow", "/keepassxc")
window.openDatabase(sys.argv[2], sys.stdin.read(), dbus_interface="org.keepassxc.KeePassXC.MainWindow",
                    signature="ss")
"""


def database_xml(group: uuid.UUID) -> str:
    """One group (the root), exposed to the Secret Service by its UUID."""
    return f"""<?xml version="1.0" encoding="utf-8" standalone="yes"?>
<KeePassFile>
  <Meta>
    <Generator>auth-agent e2e</Generator>
    <DatabaseName>auth-agent e2e</DatabaseName>
    <CustomData>
      <Item><Key>FDO_SECRETS_EXPOSED_GROUP</Key><Value>{{{group}}}</Value></Item>
    </CustomData>
  </Meta>
  <Root>
    <Group>
      <UUID>{base64.b64encode(group.bytes).decode()}</UUID>
      <Name>Passwords</Name>
    </Group>
  </Root>
</KeePassFile>
"""


class KeePassXCBus(Keyring):
    """A private session bus (no service files) with KeePassXC owning org.freedesktop.secrets, its database open
    and unlocked. The secret-tool helpers of ``Keyring`` work against it."""

    def __init__(self, base: Path, confirm_access: bool = False):
        super().__init__(base, with_keyring=False)
        # KeePassXC's "Confirm when passwords are retrieved by clients" (on by default in KeePassXC itself).
        self.confirm_access = confirm_access
        self.database = base / "passwords.kdbx"
        self.config = base / "keepassxc.ini"
        self.xvfb: subprocess.Popen | None = None
        self.display: str | None = None
        self.proc: subprocess.Popen | None = None
        self.tmp = base / "tmp"

    def _tool_env(self) -> dict:
        return {**super()._tool_env(), "DISPLAY": self.display or "", "XDG_CONFIG_HOME": str(self.home / ".config"),
                "XDG_CACHE_HOME": str(self.home / ".cache"), "XDG_DATA_HOME": str(self.home / ".local/share"),
                "TMPDIR": str(self.tmp)}

    def start(self):
        super().start()
        self.home.mkdir(mode=0o700, exist_ok=True)
        self.runtime.mkdir(mode=0o700, exist_ok=True)
        self.tmp.mkdir(mode=0o700, exist_ok=True)
        self._make_database()
        self.config.write_text(CONFIG.replace("{confirm}", "true" if self.confirm_access else "false"))
        self._start_xvfb()
        self.proc = subprocess.Popen(["keepassxc", "--config", str(self.config), "--pw-stdin", str(self.database)],
                                     env=self._tool_env(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=open(self.base / "keepassxc.log", "wb"), start_new_session=True)
        self.proc.stdin.write(f"{DATABASE_PASSWORD}\n".encode())
        self.proc.stdin.close()
        self.daemon_pid = self.proc.pid
        wait_for(lambda: self.proc.poll() is None and self.state() == "unlocked", 20,
                 "KeePassXC to own org.freedesktop.secrets with its database unlocked")
        return self

    def _make_database(self):
        xml = self.base / "passwords.xml"
        xml.write_text(database_xml(uuid.uuid4()))
        out = subprocess.run(["keepassxc-cli", "import", "--quiet", "--set-password", "--decryption-time", "100",
                              str(xml), str(self.database)],
                             input=f"{DATABASE_PASSWORD}\n{DATABASE_PASSWORD}\n", env=self._tool_env(),
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and self.database.exists(), f"keepassxc-cli import failed: {out.stderr}"
        xml.unlink()

    def _start_xvfb(self):
        """Xvfb writes its display number to -displayfd once it accepts clients."""
        read, write = os.pipe()
        self.xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-nolisten", "tcp", "-screen", "0",
                                      "1024x768x24"], pass_fds=(write,), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(write)
        with os.fdopen(read) as f:
            number = f.readline().strip()
        assert number.isdigit(), f"Xvfb did not start (exit {self.xvfb.poll()})"
        self.display = f":{number}"

    def stop(self):
        for proc in (self.proc, self.xvfb):
            if proc is not None:
                kill_pid(proc.pid)
                assert not pid_alive(proc.pid), f"pid {proc.pid} survived the KeePassXC teardown"
        self.daemon_pid = None
        super().stop()

    # -- the database's state, as a Secret Service client sees it

    def state(self) -> str:
        """"unlocked", "locked", or "closed" (no default alias: KeePassXC has no database open); "" before the
        name is owned."""
        owned = self._dbus("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner",
                           "org.freedesktop.secrets")
        if owned != "(true,)":
            return ""
        alias = self._dbus("org.freedesktop.secrets", "/org/freedesktop/secrets",
                           "org.freedesktop.Secret.Service.ReadAlias", "default", check=False)
        if alias == "(objectpath '/',)":
            return "closed"
        if alias != f"(objectpath '{COLLECTION}',)":
            return ""
        locked = self._dbus("org.freedesktop.secrets", COLLECTION, "org.freedesktop.DBus.Properties.Get",
                            "org.freedesktop.Secret.Collection", "Locked", check=False)
        return {"(<true>,)": "locked", "(<false>,)": "unlocked"}.get(locked, "")

    def _window(self, method: str):
        self._dbus("org.keepassxc.KeePassXC.MainWindow", "/keepassxc", f"org.keepassxc.KeePassXC.MainWindow.{method}")

    def allow_access(self, timeout: float = 20) -> None:
        """Answers KeePassXC's "Access Request" dialog (confirm_access) as a person would: Return, its default
        button, allows the access. Polls the Xvfb display (xdotool) until the dialog has shown and gone again; the
        key is sent again while the dialog stays. (xdotool reports the key's release as failed: the press closed the
        window it was sent to.)"""
        env = {"DISPLAY": self.display or "", "PATH": SYSTEM_PATH}

        def dialog() -> str | None:
            found = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", "Access Request"], env=env,
                                   capture_output=True, text=True, timeout=10)
            return found.stdout.split()[0] if found.returncode == 0 and found.stdout.split() else None

        answered = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            window = dialog()
            if window is None:
                if answered:
                    return
            else:
                subprocess.run(["xdotool", "windowfocus", "--sync", window], env=env, capture_output=True, timeout=10)
                subprocess.run(["xdotool", "key", "--window", window, "Return"], env=env, capture_output=True, timeout=10)
                answered = True
            time.sleep(0.2)
        raise AssertionError(f"KeePassXC's Access Request dialog {'did not close' if answered else 'never showed'} "
                             f"within {timeout} s")

    def lock(self):
        self._window("lockAllDatabases")
        wait_for(lambda: self.state() == "locked", 10, "the KeePassXC database to lock")

    def close(self):
        self._window("closeAllDatabases")
        wait_for(lambda: self.state() == "closed", 10, "the KeePassXC database to close")

    def unlock(self):
        """Opens (or unlocks) the database through KeePassXC's own D-Bus interface, as its browser integration does."""
        out = subprocess.run(["/usr/bin/python3", "-c", OPEN_DATABASE, self.address, str(self.database)],
                             input=DATABASE_PASSWORD, env={"PATH": SYSTEM_PATH}, capture_output=True, text=True,
                             timeout=20)
        assert out.returncode == 0, f"openDatabase failed: {out.stderr[-500:]}"
        wait_for(lambda: self.state() == "unlocked", 10, "the KeePassXC database to unlock")
