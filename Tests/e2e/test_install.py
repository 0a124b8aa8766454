"""`make install` / `make uninstall` into a DESTDIR: the tree a packager or a user gets, and that uninstall removes
exactly what install recorded."""
import os
import subprocess

from conftest import REPO, bin_dir


def make(*args, timeout=900):
    """Installs the binaries under test (BUILT=), without running swift."""
    env = dict(os.environ)
    return subprocess.run(["make", "-C", str(REPO), *args, f"BUILT={bin_dir()}"], env=env, capture_output=True,
                          text=True, timeout=timeout)


def has_symbol_table(path):
    sections = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True, timeout=60).stdout
    assert "Section Headers" in sections, sections
    return ".symtab" in sections


def files_under(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())


def test_packager_install_and_uninstall(tmp_path):
    bin_dir()
    root = tmp_path / "pkgroot"
    result = make("install", "PREFIX=/usr", f"DESTDIR={root}")
    assert result.returncode == 0, result.stdout + result.stderr
    expected = [
        "usr/bin/auth-agent", "usr/bin/authctl",
        "usr/lib/systemd/user/auth-agent.service", "usr/lib/systemd/user/auth-agent.socket",
        "usr/share/auth-agent/install-manifest",
        "usr/share/bash-completion/completions/authctl",
        "usr/share/dbus-1/interfaces/dev.authagent.Agent1.xml", "usr/share/dbus-1/services/dev.authagent.Agent.service",
        "usr/share/doc/auth-agent/docs/CLI.md", "usr/share/doc/auth-agent/docs/DBUS.md", "usr/share/doc/auth-agent/docs/INTEGRATIONS.md", "usr/share/doc/auth-agent/docs/PROTOCOL.md", "usr/share/doc/auth-agent/docs/PROVIDERS.md", "usr/share/doc/auth-agent/docs/SECURITY.md",
        "usr/share/doc/auth-agent/README.md", "usr/share/fish/vendor_completions.d/authctl.fish",
        "usr/share/man/man1/auth-agent.1", "usr/share/man/man1/authctl.1", "usr/share/zsh/site-functions/_authctl",
    ]
    assert files_under(root) == sorted(expected)
    assert os.access(root / "usr/bin/authctl", os.X_OK)
    for exe in ("auth-agent", "authctl"):
        assert has_symbol_table(bin_dir() / exe), f"the build tree's {exe} keeps its symbols"
        assert not has_symbol_table(root / "usr/bin" / exe), f"the installed {exe} is stripped"
    version = subprocess.run([str(root / "usr/bin/authctl"), "--version"], capture_output=True, text=True, timeout=30)
    assert version.returncode == 0 and version.stdout.strip(), "the stripped authctl runs"
    unit = (root / "usr/lib/systemd/user/auth-agent.service").read_text()
    assert "ExecStart=/usr/bin/auth-agent\n" in unit, "ExecStart points at the installed binary"
    for name in ("auth-agent.service", "auth-agent.socket"):
        text = (root / "usr/lib/systemd/user" / name).read_text()
        assert "Documentation=file:///usr/share/doc/auth-agent/README.md\n" in text, \
            f"{name}: a packager's unit points at the packaged docs, not a home directory"
    activation = (root / "usr/share/dbus-1/services/dev.authagent.Agent.service").read_text()
    assert "Exec=/usr/bin/auth-agent\n" in activation and "SystemdService=auth-agent.service\n" in activation
    assert "Name=dev.authagent.Agent\n" in activation
    assert (root / "usr/share/dbus-1/interfaces/dev.authagent.Agent1.xml").read_text() == \
        (REPO / "dbus/dev.authagent.Agent.xml").read_text()
    assert "_authctl" in (root / "usr/share/bash-completion/completions/authctl").read_text()
    assert "logout" in (root / "usr/share/man/man1/authctl.1").read_text()
    manifest = (root / "usr/share/auth-agent/install-manifest").read_text().split()
    assert sorted(manifest) == sorted("/" + f for f in expected)
    assert "systemctl --user" in result.stdout, "with DESTDIR nothing is enabled; the user is told what to run"

    result = make("uninstall", "PREFIX=/usr", f"DESTDIR={root}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert files_under(root) == [], "uninstall removes exactly what install put there"


def test_user_install_layout(tmp_path):
    bin_dir()
    home = tmp_path / "home"
    result = make("install", f"PREFIX={home}/.local", f"USERUNITDIR={home}/.config/systemd/user", f"DESTDIR={tmp_path}/d")
    assert result.returncode == 0, result.stdout + result.stderr
    base = tmp_path / "d" / str(home).lstrip("/")
    unit = (base / ".config/systemd/user/auth-agent.service").read_text()
    assert f"ExecStart={home}/.local/bin/auth-agent\n" in unit
    assert f"Documentation=file://{home}/.local/share/doc/auth-agent/README.md\n" in unit
    # The session bus finds user-installed activatable services in $XDG_DATA_HOME/dbus-1/services.
    activation = (base / ".local/share/dbus-1/services/dev.authagent.Agent.service").read_text()
    assert f"Exec={home}/.local/bin/auth-agent\n" in activation
    assert (base / ".local/bin/authctl").exists()
    result = make("uninstall", f"PREFIX={home}/.local", f"USERUNITDIR={home}/.config/systemd/user", f"DESTDIR={tmp_path}/d")
    assert result.returncode == 0, result.stdout + result.stderr
    assert files_under(tmp_path / "d") == []


def test_man_page_covers_every_subcommand():
    """The committed man page (`make man`) is not stale: every authctl subcommand in --help has its entry."""
    help_text = subprocess.run([str(bin_dir() / "authctl"), "--help"], capture_output=True, text=True, timeout=30).stdout
    section = help_text.split("SUBCOMMANDS:")[1].split("\n\n")[0]
    # Command lines are indented by two spaces; wrapped description lines by many more.
    commands = [line.split()[0] for line in section.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    assert {"status", "login", "logout", "token"} <= set(commands), commands
    man = (REPO / "docs/man/authctl.1").read_text()
    for command in commands:
        assert f".It Em {command}\n" in man, f"docs/man/authctl.1 lacks '{command}': run `make man`"
