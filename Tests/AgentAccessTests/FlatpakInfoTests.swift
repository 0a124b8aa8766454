@testable import AgentAccess
import XCTest

/// `/.flatpak-info` as `flatpak run` writes it (common/flatpak-run.c: `[Application]`, `[Instance]`, then the final
/// permissions by `flatpak_context_save_metadata` with `flatten`: `[Context]` lists without `!` entries, one
/// `[Session Bus Policy]` key per name), with the permissions these apps' Flathub manifests ask for. There is no
/// Flatpak on the test machines; the layout and the keys are Flatpak's.
final class FlatpakInfoTests: XCTestCase {
    static func info(context: String, sessionBus: String = "", systemBus: String = "") -> String {
        """
        [Application]
        name=org.example.App
        runtime=runtime/org.gnome.Platform/x86_64/46

        [Instance]
        instance-id=1791535547
        instance-path=/home/u/.var/app/org.example.App
        app-path=/var/lib/flatpak/app/org.example.App/x86_64/stable/4f1e/files
        branch=stable
        arch=x86_64
        flatpak-version=1.14.4
        session-bus-proxy=true
        system-bus-proxy=true

        [Context]
        \(context)

        [Session Bus Policy]
        \(sessionBus)

        [System Bus Policy]
        \(systemBus)

        [Environment]
        sockets=session-bus
        """
    }

    func testAContainedAppHasNoHoles() {
        // Thunderbird-like: network, display, its own download and runtime directories, the agent's socket read-only.
        let text = Self.info(context: """
            shared=network;ipc;
            sockets=x11;wayland;pulseaudio;fallback-x11;system-bus;
            devices=dri;
            filesystems=xdg-download;xdg-run/auth-agent:ro;home:ro;host-os;host-etc;~/.thunderbird:create;
            """, sessionBus: "org.freedesktop.Notifications=talk\ndev.authagent.Agent=talk\norg.freedesktop.secrets=see",
            systemBus: "org.freedesktop.Flatpak=talk\norg.freedesktop.login1=talk")
        let info = FlatpakInfo(parsing: text)
        XCTAssertEqual(info.app, "org.example.App")
        XCTAssertEqual(info.instance, "1791535547")
        XCTAssertEqual(info.holes, [], "system-bus, read-only home, host-os/host-etc, `see` and the system bus are not holes")
    }

    func testEachHoleIsNamedAsFlatpakOverrideSpellsIt() {
        // Evolution-like (GNOME Online Accounts and the whole keyring), an IDE (the host file system and host
        // commands), and a session bus socket: each is "not contained".
        let evolution = FlatpakInfo(parsing: Self.info(context: "sockets=x11;wayland;\nfilesystems=xdg-run/gvfsd;",
                                                       sessionBus: "org.gnome.OnlineAccounts=talk\norg.freedesktop.secrets=talk"))
        XCTAssertEqual(evolution.holes, ["talk-name=org.freedesktop.secrets"])
        let ide = FlatpakInfo(parsing: Self.info(context: "filesystems=host;xdg-run/gnupg:ro;",
                                                 sessionBus: "org.freedesktop.Flatpak=talk"))
        XCTAssertEqual(ide.holes, ["filesystem=host", "talk-name=org.freedesktop.Flatpak"])
        let bus = FlatpakInfo(parsing: Self.info(context: "sockets=wayland;session-bus;if:session-bus:has-wayland;"))
        XCTAssertEqual(bus.holes, ["socket=session-bus"], "once, though Flatpak also writes the conditional entry")
        let home = FlatpakInfo(parsing: Self.info(context: "filesystems=home:create;host:rw;",
                                                  sessionBus: "org.freedesktop.systemd1=own"))
        XCTAssertEqual(home.holes, ["filesystem=home:create", "filesystem=host:rw", "own-name=org.freedesktop.systemd1"])
    }

    /// Issue 53, hole 9: what a filesystem permission reaches decides, not how it is spelt.
    func testAWritablePlaceHostProgramsRunFromIsAHoleHoweverItIsSpelt() {
        let home = "/home/alice"
        for hole in ["home", "~", "~/", "/home/alice", "/home/alice:rw", "/home", "/", "host", "xdg-config", "xdg-config/autostart",
                     "xdg-data/applications", "xdg-data:create", "~/.bashrc", "~/.config/systemd/user", "/home/alice/.profile",
                     "/home/alice/.local/bin", "~/bin", "~/.ssh", "xdg-run/bus", "xdg-run/bus:ro", "xdg-run/systemd", "xdg-run",
                     "~/Documents/../.bashrc"] {
            XCTAssertTrue(FlatpakInfo.reachesHostCode(hole, home: home), hole)
        }
        for contained in ["home:ro", "~/.bashrc:ro", "host:ro", "host-os", "host-etc", "xdg-download", "xdg-documents/x",
                          "~/Documents", "/home/alice/Music", "/home/bob", "/srv/data", "xdg-run/auth-agent:ro", "xdg-run/gvfsd",
                          "~/.thunderbird:create", "xdg-cache"] {
            XCTAssertFalse(FlatpakInfo.reachesHostCode(contained, home: home), contained)
        }
        XCTAssertTrue(FlatpakInfo.reachesHostCode("/home/alice/x", home: nil), "no home to compare with: fail closed")
        let info = FlatpakInfo(parsing: Self.info(context: "filesystems=/home/alice;xdg-config/autostart:create;~/Music;"), home: home)
        XCTAssertEqual(info.holes, ["filesystem=/home/alice", "filesystem=xdg-config/autostart:create"])
    }

    /// Issue 53, hole 1: a prefix of a larger marker names the app; permissions it cut off count as a hole.
    func testAPrefixNamesTheAppAndPermissionsItCutOffAreAHole() {
        let complete = FlatpakInfo(parsing: Self.info(context: "filesystems=xdg-download;"), complete: false)
        XCTAssertEqual(complete.app, "org.example.App")
        XCTAssertEqual(complete.holes, [], "[Environment] came: every permission was read")
        let cut = FlatpakInfo(parsing: "[Application]\nname=org.example.App\n[Context]\nfilesystems=xdg-download;ho", complete: false)
        XCTAssertEqual(cut.app, "org.example.App")
        XCTAssertEqual(cut.holes, [FlatpakInfo.unreadPermissions])
        XCTAssertNil(FlatpakInfo(parsing: "[Application]\nname=org.example.Ap", complete: false).app, "a cut name names nothing")
    }

    func testBusNamePrefixesCoverTheNamesBelowThem() {
        let wide = FlatpakInfo(parsing: Self.info(context: "", sessionBus: "org.freedesktop.*=talk"))
        XCTAssertEqual(wide.holes, ["talk-name=org.freedesktop.*"])
        let exact = FlatpakInfo(parsing: Self.info(context: "", sessionBus: "org.freedesktop.secrets.*=talk"))
        XCTAssertEqual(exact.holes, ["talk-name=org.freedesktop.secrets.*"], "NAME.* covers NAME itself")
        let other = FlatpakInfo(parsing: Self.info(context: "", sessionBus: "org.freedesktop.secretsX=talk\norg.freedesktop.Flatpak.Foo=talk\norg.gnome.*=talk"))
        XCTAssertEqual(other.holes, [])
    }

    func testListsSplitOnlyAtUnescapedSemicolons() {
        // A path holding `;` is written `\;` by GKeyFile: `/srv/a;host` is one path, not the host file system.
        let escaped = FlatpakInfo(parsing: Self.info(context: "filesystems=/srv/a\\;host;"), home: "/home/alice")
        XCTAssertEqual(escaped.holes, [])
    }

    func testOnlyADecimalInstanceIDNamesADirectory() {
        let base = "[Application]\nname=org.example.App\n[Instance]\n"
        XCTAssertEqual(FlatpakInfo(parsing: base + "instance-id = 42\n").instance, "42")
        XCTAssertNil(FlatpakInfo(parsing: base + "instance-id=../../x\n").instance)
        XCTAssertNil(FlatpakInfo(parsing: base + "instance-id=\(String(repeating: "1", count: 21))\n").instance)
        XCTAssertNil(FlatpakInfo(parsing: base + "instance-id=\n").instance)
        XCTAssertNil(FlatpakInfo(parsing: base + "instance-id=x\ninstance-id=7\n").instance, "the first decides")
        XCTAssertNil(FlatpakInfo(parsing: "[Application]\nname=org.example.App\ninstance-id=42\n").instance, "not in [Instance]")
    }

    /// Recorded from bubblewrap 0.8.0 here: `bwrap --unshare-user --disable-userns --unshare-pid ... --info-fd 3`,
    /// `--unshare-all`, and no namespace option at all.
    func testBwrapInfoNamespaces() {
        let flatpakShaped = "{\n    \"child-pid\": 13023,\n    \"mnt-namespace\": 4026532178,\n    \"pid-namespace\": 4026532179\n}"
        XCTAssertEqual(ProcFS.bwrapNamespaces(json: flatpakShaped), .init(pid: 4026532179, mount: 4026532178))
        let all = """
            {
                "child-pid": 17930,
                "cgroup-namespace": 4026532182,
                "ipc-namespace": 4026532180,
                "mnt-namespace": 4026532178,
                "net-namespace": 4026532183,
                "pid-namespace": 4026532181,
                "uts-namespace": 4026532179
            }
            """
        XCTAssertEqual(ProcFS.bwrapNamespaces(json: all), .init(pid: 4026532181, mount: 4026532178))
        XCTAssertEqual(ProcFS.bwrapNamespaces(json: "{\n    \"child-pid\": 17934,\n    \"mnt-namespace\": 4026532178\n}"),
                       .init(pid: nil, mount: 4026532178))
        XCTAssertNil(ProcFS.bwrapNamespaces(json: "{\"pid-namespace\": \"4026532179\"}"), "not a number")
        XCTAssertNil(ProcFS.bwrapNamespaces(json: "[4026532179]"))
        XCTAssertNil(ProcFS.bwrapNamespaces(json: "{\"pid-namespace\": 40265"))
    }

    /// A record names both namespaces (bwrap always makes both for a Flatpak sandbox) and the caller is in them;
    /// a record naming fewer is not believed (before: one naming neither let any caller through unchecked).
    func testARecordMustNameBothNamespacesAndTheCallerBeInThem() {
        var mine = stat()
        XCTAssertEqual(stat("/proc/self/ns/mnt", &mine), 0)
        let record = ProcFS.BwrapNamespaces(pid: 100, mount: UInt64(mine.st_ino))
        XCTAssertEqual(FlatpakInstance.compare(record, instance: "7", pid: getpid(), pidNamespace: 100), .consistent)
        guard case .mismatch(let why) = FlatpakInstance.compare(record, instance: "7", pid: getpid(), pidNamespace: 101) else {
            return XCTFail("another pid namespace matched")
        }
        XCTAssertEqual(why, "its pid namespace 101 is not instance 7's (100)")
        // This process's mount namespace is not inode 1.
        guard case .mismatch(let mount) = FlatpakInstance.compare(.init(pid: 100, mount: 1), instance: "7", pid: getpid(),
                                                                  pidNamespace: 100) else {
            return XCTFail("another mount namespace matched")
        }
        XCTAssertTrue(mount.hasPrefix("its mount namespace "), mount)
        for partial in [ProcFS.BwrapNamespaces(pid: nil, mount: nil), .init(pid: 100, mount: nil), .init(pid: nil, mount: UInt64(mine.st_ino))] {
            guard case .mismatch(let why) = FlatpakInstance.compare(partial, instance: "7", pid: getpid(), pidNamespace: 100) else {
                return XCTFail("a record naming fewer than both namespaces was believed: \(partial)")
            }
            XCTAssertEqual(why, "instance 7's bwrapinfo.json does not name its pid and mount namespaces")
        }
    }

    /// A caller in the agent's own pid namespace (Flatpak's D-Bus proxy, which runs there) is not compared; any other
    /// that names no instance, or one without a record, is not believed.
    func testACallerInAPidNamespaceOfItsOwnNeedsItsInstancesRecord() {
        XCTAssertEqual(FlatpakInstance.check(instance: nil, pid: getpid()), .unchecked)
        XCTAssertEqual(FlatpakInstance.check(instance: "7", pid: getpid()), .unchecked)
        let kind = FlatpakInfo.kind(marker: "[Application]\nname=org.example.App\n", complete: true, home: nil) { instance in
            XCTAssertNil(instance)
            return "its /.flatpak-info names no instance"
        }
        guard case .unidentified(let why, let claimed) = kind else { return XCTFail("\(kind)") }
        XCTAssertEqual(why, "its /.flatpak-info names no instance")
        XCTAssertEqual(claimed, "org.example.App")
    }
}
