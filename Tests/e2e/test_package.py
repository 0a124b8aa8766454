"""`make deb`: the Debian package of the release build, its contents and control fields, and a real
`apt-get install` / `remove` / `purge` of it.

The install runs in a throwaway copy of this machine (an overlayfs over `/` in a private mount namespace, entered
with chroot), so that the D-Bus service file and the global socket enablement do not reach the other tests and
sessions on the machine; apt, dpkg, the maintainer scripts, deb-systemd-helper and systemd-analyze are the
machine's own. Needs root and a release build (AUTH_AGENT_BIN_DIR=.build/release): a debug build links the Swift
runtime from the toolchain, which no Debian package provides, and `make deb` refuses it."""
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, SYSTEM_PATH, bin_dir

UNITS = ("auth-agent.service", "auth-agent.socket")
ENABLE_LINK = "/etc/systemd/user/sockets.target.wants/auth-agent.socket"


def run(cmd, timeout=300, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)


def needed(binary: Path) -> list[str]:
    dump = run(["objdump", "-p", str(binary)]).stdout
    return re.findall(r"^\s*NEEDED\s+(\S+)", dump, re.M)


@pytest.fixture(scope="module")
def deb():
    """Builds the package from the binaries under test, as CI does: `make deb BUILT=DIR`."""
    binaries = bin_dir()
    if any(lib.startswith(("libswift", "libFoundation")) for lib in needed(binaries / "auth-agent")):
        pytest.skip(f"{binaries} is a debug build (Swift runtime linked as shared libraries): the .deb packages the "
                    "release build; run with AUTH_AGENT_BIN_DIR=.build/release")
    for tool in ("dpkg-deb", "dpkg-shlibdeps", "objdump"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} not found (scripts/setup installs dpkg-dev and binutils)", pytrace=False)
    result = run(["make", "-C", str(REPO), "deb", f"BUILT={binaries}"], timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    version = run([str(binaries / "auth-agent"), "--version"]).stdout.strip()
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()
    path = REPO / ".build" / "deb" / f"auth-agent_{version}_{arch}.deb"
    assert path.is_file(), f"make deb did not write {path}: {result.stdout}"
    return path, version, arch, binaries


def test_control_fields_and_depends_from_the_linked_libraries(deb):
    path, version, arch, binaries = deb
    fields = {key: run(["dpkg-deb", "-f", str(path), key]).stdout.strip()
              for key in ("Package", "Version", "Architecture", "Depends", "Maintainer", "Installed-Size")}
    assert fields["Package"] == "auth-agent"
    assert fields["Version"] == version and fields["Architecture"] == arch
    assert fields["Maintainer"] and int(fields["Installed-Size"]) > 0
    depends = {re.split(r"[\s(]", alternative.strip())[0] for alternative in fields["Depends"].split(",")}
    # Each shared library the agent links (objdump's NEEDED, independent of dpkg-shlibdeps) must come from a package
    # named in Depends; authctl is fully static.
    assert needed(binaries / "authctl") == [], "authctl's release link is static"
    libraries = needed(binaries / "auth-agent")
    for library in libraries:
        owner = run(["dpkg", "-S", f"*/{library}"]).stdout.split(":")[0]
        assert owner in depends, f"{library} comes from {owner}, which Depends ({fields['Depends']}) does not name"
    assert {"libsecret-1-0", "libsystemd0", "libglib2.0-0", "libc6"} <= depends, fields["Depends"]
    # tpm2-tss (dpop_key = "tpm"): ESYS and the TCTI loader are linked; the loader dlopens the device and swtpm TCTIs,
    # which no NEEDED names, and Debian's libtss2-tctildr0 depends on them itself.
    assert "libtss2-tctildr0" in depends and any(name.startswith("libtss2-esys") for name in depends), fields["Depends"]
    assert not any("swift" in name for name in depends), fields["Depends"]
    if "GLIBC_ABI_DT_RELR" in run(["objdump", "-p", str(binaries / "auth-agent")]).stdout:
        libc = re.search(r"libc6 \(>= ([^)]+)\)", fields["Depends"]).group(1)
        assert run(["dpkg", "--compare-versions", libc, "ge", "2.36"]).returncode == 0, \
            f"packed relative relocations need glibc 2.36, Depends says libc6 >= {libc}"


def test_contents(deb):
    path, *_ = deb
    listing = run(["dpkg-deb", "-c", str(path)]).stdout
    files = sorted(line.split()[-1].lstrip(".") for line in listing.splitlines() if not line.startswith("d"))
    assert files == sorted([
        "/usr/bin/auth-agent", "/usr/bin/authctl",
        "/usr/lib/systemd/user/auth-agent.service", "/usr/lib/systemd/user/auth-agent.socket",
        "/usr/share/bash-completion/completions/authctl",
        "/usr/share/dbus-1/interfaces/dev.authagent.Agent1.xml", "/usr/share/dbus-1/services/dev.authagent.Agent.service",
        "/usr/share/doc/auth-agent/docs/CLI.md", "/usr/share/doc/auth-agent/docs/DBUS.md", "/usr/share/doc/auth-agent/docs/INTEGRATIONS.md", "/usr/share/doc/auth-agent/docs/PROTOCOL.md", "/usr/share/doc/auth-agent/docs/PROVIDERS.md", "/usr/share/doc/auth-agent/docs/SECURITY.md",
        "/usr/share/doc/auth-agent/README.md",
        "/usr/share/doc/auth-agent/changelog.gz", "/usr/share/doc/auth-agent/copyright",
        "/usr/share/fish/vendor_completions.d/authctl.fish", "/usr/share/lintian/overrides/auth-agent",
        "/usr/share/man/man1/auth-agent.1.gz", "/usr/share/man/man1/authctl.1.gz",
        "/usr/share/zsh/site-functions/_authctl",
    ])
    assert all(" root/root " in line for line in listing.splitlines()), listing
    with tempfile.TemporaryDirectory() as tmp:
        assert run(["dpkg-deb", "-R", str(path), tmp]).returncode == 0
        root = Path(tmp)
        for exe in ("auth-agent", "authctl"):
            sections = run(["readelf", "-S", "-W", str(root / "usr/bin" / exe)]).stdout
            assert ".symtab" not in sections, f"{exe} is installed with its symbol table (not stripped)"
        for unit in UNITS:
            text = (root / "usr/lib/systemd/user" / unit).read_text()
            documentation = re.search(r"^Documentation=(.*)$", text, re.M).group(1)
            assert documentation == "file:///usr/share/doc/auth-agent/README.md", documentation
        assert "ExecStart=/usr/bin/auth-agent\n" in (root / "usr/lib/systemd/user/auth-agent.service").read_text()
        assert "Exec=/usr/bin/auth-agent\n" in (root / "usr/share/dbus-1/services/dev.authagent.Agent.service").read_text()
        assert sorted(p.name for p in (root / "DEBIAN").iterdir()) == ["control", "md5sums", "postinst", "postrm"]
        md5sums = (root / "DEBIAN/md5sums").read_text()
        assert "usr/bin/auth-agent\n" in md5sums and "usr/share/doc/auth-agent/copyright\n" in md5sums


class Overlay:
    """A copy-on-write view of this machine: an overlayfs of / on a tmpfs, in a mount namespace held by a sleeping
    process; `run` executes a command chrooted into it."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="auth-agent-deb-"))
        root = self.dir / "root"
        script = (f"mount -t tmpfs tmpfs {self.dir} && mkdir {self.dir}/upper {self.dir}/work {root} && "
                  f"mount -t overlay overlay -o lowerdir=/,upperdir={self.dir}/upper,workdir={self.dir}/work {root} && "
                  f"mount -t proc proc {root}/proc && mount --rbind /dev {root}/dev && mount --rbind /sys {root}/sys && "
                  f"mount -t tmpfs tmpfs {root}/run && mount -t tmpfs tmpfs {root}/tmp && echo ready && exec sleep 600")
        self.holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.holder.stdout.readline()  # bounded: the holder prints "ready" or exits
        if line.strip() != "ready":
            self.close()
            pytest.fail(f"could not set up the overlay: {self.holder.stderr.read()}", pytrace=False)
        self.root = root

    def run(self, *command, timeout=300):
        env = {"PATH": SYSTEM_PATH, "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8", "HOME": "/root",
               "XDG_RUNTIME_DIR": "/run/user/0"}
        return run(["nsenter", "-t", str(self.holder.pid), "-m", "chroot", str(self.root), *command],
                   env=env, timeout=timeout)

    def copy_in(self, source: Path, target: str):
        """The overlay shows the disk's /, not the bind mounts of this test's namespace (inwt's clone at /work/main):
        copy from the holder's namespace, which has both."""
        result = run(["nsenter", "-t", str(self.holder.pid), "-m", "cp", str(source), f"{self.root}{target}"])
        assert result.returncode == 0, result.stderr

    def exists(self, path: str) -> bool:
        return self.run("test", "-e", path).returncode == 0 or self.run("test", "-L", path).returncode == 0

    def close(self):
        self.holder.kill()
        self.holder.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def test_apt_install_runs_verify_and_purge_leaves_nothing(deb):
    path, version, *_ = deb
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"):
        pytest.skip("installing the package needs root, unshare and nsenter (util-linux)")
    machine = Overlay()
    try:
        machine.copy_in(path, f"/tmp/{path.name}")
        result = machine.run("apt-get", "install", "-y", "--no-install-recommends", f"/tmp/{path.name}")
        assert result.returncode == 0, result.stdout + result.stderr
        assert machine.run("dpkg-query", "-W", "-f", "${Status}", "auth-agent").stdout == "install ok installed"
        for exe in ("auth-agent", "authctl"):
            result = machine.run(f"/usr/bin/{exe}", "--version")
            assert result.returncode == 0 and result.stdout.strip() == version, (exe, result.stdout, result.stderr)
        result = machine.run("/usr/bin/authctl", "--help")
        assert result.returncode == 0 and "SUBCOMMANDS" in result.stdout, result.stdout + result.stderr
        # postinst enabled the socket for every user, as `systemctl --global enable` does.
        link = machine.run("readlink", ENABLE_LINK)
        assert link.stdout.strip() == "/usr/lib/systemd/user/auth-agent.socket", link.stdout + link.stderr
        assert machine.run("mkdir", "-p", "-m", "700", "/run/user/0").returncode == 0
        result = machine.run("systemd-analyze", "--user", "verify",
                             *(f"/usr/lib/systemd/user/{unit}" for unit in UNITS))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "auth-agent" not in result.stderr, result.stderr  # no warning about our units either

        files = machine.run("dpkg-query", "-L", "auth-agent").stdout.split()
        owned = ["/usr/bin/auth-agent", "/usr/bin/authctl", "/usr/lib/systemd/user/auth-agent.service",
                 "/usr/lib/systemd/user/auth-agent.socket", "/usr/share/dbus-1/services/dev.authagent.Agent.service"]
        assert set(owned) <= set(files), files
        result = machine.run("apt-get", "remove", "-y", "auth-agent")
        assert result.returncode == 0, result.stdout + result.stderr
        for f in owned + [ENABLE_LINK]:
            assert not machine.exists(f), f"{f} is left after apt-get remove"
        result = machine.run("apt-get", "purge", "-y", "auth-agent")
        assert result.returncode == 0, result.stdout + result.stderr
        assert machine.run("dpkg-query", "-W", "auth-agent").returncode != 0, "dpkg still knows the package"
        left = machine.run("find", "/usr", "/etc", "/var/lib/systemd", "/var/lib/dpkg/info",
                           "-name", "*auth-agent*", "-o", "-name", "*authctl*", "-o", "-name", "dev.authagent.*")
        assert left.stdout.strip() == "", f"left behind after purge:\n{left.stdout}"
    finally:
        machine.close()


# Issue 57: what the two programs cost installed (stripped, as the package puts them in /usr/bin), in MB of 10^6
# bytes. A guard, not the target: it fails when a change makes them bigger than the last measured build (41.30 MB:
# auth-agent 27.12, authctl 14.18, built with packaging/release-toolset.json as `make build` builds and linked
# through packaging/link/lld-without-swift-unwind-tables as Package.swift links every release build; without that
# linker 47.25 MB, without the toolset bigger still: both fail here) by more than 2 %, so growth is a decision, not
# an accident. The target (30 MB) and what each part costs: docs/BENCHMARKS.md, "Installed size"
# (`BENCH_ONLY=size scripts/bench`).
INSTALLED_BINARIES_MAX_MB = 42.1


def test_installed_size_of_both_programs(deb):
    path, *_ = deb
    with tempfile.TemporaryDirectory() as tmp:
        assert run(["dpkg-deb", "-x", str(path), tmp]).returncode == 0
        sizes = {exe: (Path(tmp) / "usr/bin" / exe).stat().st_size / 1e6 for exe in ("auth-agent", "authctl")}
    total = sum(sizes.values())
    print(f"installed: auth-agent {sizes['auth-agent']:.2f} MB, authctl {sizes['authctl']:.2f} MB, together {total:.2f} MB")
    assert total <= INSTALLED_BINARIES_MAX_MB, \
        (f"auth-agent and authctl take {total:.2f} MB installed, more than the {INSTALLED_BINARIES_MAX_MB} MB guard "
         f"({sizes}); was it built with packaging/release-toolset.json (`make build`), and linked by "
         f"packaging/link/lld-without-swift-unwind-tables (Package.swift)? See docs/BENCHMARKS.md, "
         f"'Installed size', and raise the guard only with a reason")
