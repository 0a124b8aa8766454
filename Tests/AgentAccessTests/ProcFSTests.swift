@testable import AgentAccess
import XCTest

/// The `/proc` parsers against recorded contents (this test machine has no systemd as PID 1, so callers in real
/// units or Flatpak sandboxes cannot be started here; these are what such callers' files look like).
final class ProcFSTests: XCTestCase {
    func testUnitFromUnifiedCgroupLines() {
        let cases: [(String, String?)] = [
            // A user service (systemctl --user start mbsync.service).
            ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/mbsync.service\n", "mbsync.service"),
            // A transient user scope (systemd-run --user --scope --unit=backup.scope, or a desktop launch).
            ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-org.gnome.Terminal-4242.scope\n",
             "app-gnome-org.gnome.Terminal-4242.scope"),
            // A Flatpak app's scope.
            ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-flatpak-org.gnome.Evolution-12345.scope\n",
             "app-flatpak-org.gnome.Evolution-12345.scope"),
            // A login session (ssh, a VT): the session scope.
            ("0::/user.slice/user-1000.slice/session-3.scope\n", "session-3.scope"),
            // The user manager itself.
            ("0::/user.slice/user-1000.slice/user@1000.service/init.scope\n", "init.scope"),
            // A unit with delegation made its own sub-cgroups: their names are the unit's choice and do not count.
            ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/podman.service/evil.service/mbsync.service\n", "podman.service"),
            // A system service.
            ("0::/system.slice/cron.service\n", "cron.service"),
            // Not systemd: a container's cgroup, the root.
            ("0::/process_api/897c39e815bfeac6afa803f3373b7ba9\n", nil),
            ("0::/\n", nil),
            ("", nil),
        ]
        for (file, unit) in cases {
            XCTAssertEqual(ProcFS.unit(cgroup: file), unit, file)
        }
    }

    func testUnitFromHybridAndLegacyHierarchies() {
        // This machine's own file (cgroup v1, no systemd): no unit.
        let here = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/897c39e815bfeac6afa803f3373b7ba9\n1:cpu:/\n0::/\n"
        XCTAssertNil(ProcFS.unit(cgroup: here))
        let legacy = "12:pids:/user.slice/user-1000.slice/user@1000.service\n1:name=systemd:/user.slice/user-1000.slice/user@1000.service/app.slice/mbsync.service\n"
        XCTAssertEqual(ProcFS.unit(cgroup: legacy), "mbsync.service")
        // Hybrid: the unified line wins.
        XCTAssertEqual(ProcFS.unit(cgroup: "1:name=systemd:/user.slice/user-1000.slice/session-2.scope\n0::/user.slice/user-1000.slice/session-2.scope\n"),
                       "session-2.scope")
        XCTAssertEqual(ProcFS.unit(cgroup: "1:name=systemd:/system.slice/cron.service\n0::/user.slice/user-1000.slice/session-2.scope\n"),
                       "session-2.scope")
        // A mounted but unused cgroup2 (the root, `0::/`) says nothing: the name=systemd line decides (legacy mode
        // beside a cgroup2 mount, as on this machine when a test moves a process in the v1 hierarchy only).
        let legacyBesideUnified = "9:name=systemd:/user.slice/user-0.slice/user@0.service/app.slice/mbsync.service\n8:pids:/\n0::/\n"
        XCTAssertEqual(ProcFS.unit(cgroup: legacyBesideUnified), "mbsync.service")
    }

    func testFlatpakAppFromScopeAndInfo() {
        XCTAssertEqual(ProcFS.flatpakApp(unit: "app-flatpak-org.gnome.Evolution-12345.scope"), "org.gnome.Evolution")
        XCTAssertEqual(ProcFS.flatpakApp(unit: "app-flatpak-com.example.My_App-2.scope"), "com.example.My_App")
        XCTAssertNil(ProcFS.flatpakApp(unit: "app-flatpak-org.gnome.Evolution.scope"), "no instance number")
        XCTAssertNil(ProcFS.flatpakApp(unit: "app-gnome-org.gnome.Evolution-1.scope"))
        XCTAssertNil(ProcFS.flatpakApp(unit: "app-flatpak-evolution-1.scope"), "not an application id")
        let info = """
        [Application]
        name=org.gnome.Evolution
        runtime=runtime/org.gnome.Platform/x86_64/46

        [Instance]
        instance-id=123
        """
        XCTAssertEqual(FlatpakInfo(parsing: info).app, "org.gnome.Evolution")
        XCTAssertNil(FlatpakInfo(parsing: "[Runtime]\nname=org.gnome.Platform\n").app)
        XCTAssertNil(FlatpakInfo(parsing: "[Application]\nname=not an id\n").app)
        XCTAssertNil(FlatpakInfo(parsing: "[Application]\nname=not an id\nname=org.example.App\n").app, "the first name decides")
    }

    /// Mount ids to file system types, from a recorded `/proc/PID/mountinfo` (a bwrap sandbox's tmpfs root, its
    /// `/.flatpak-info` bind mount, optional fields of varying count).
    func testFilesystemTypesFromMountinfo() {
        let mountinfo = """
        812 700 0:95 / / rw,nosuid,nodev - tmpfs tmpfs rw,mode=755,uid=1000
        813 812 259:2 /usr /usr ro,nosuid,nodev,relatime master:1 shared:7 - ext4 /dev/nvme0n1p2 rw
        840 812 0:45 /flatpak-info-XYZ /.flatpak-info ro,nosuid,nodev - tmpfs tmpfs rw,size=1611400k
        841 812 0:52 / /run/user/1000/doc rw,nosuid - fuse.portal portal rw,user_id=1000

        """
        let types = ProcFS.filesystemTypes(mountinfo: mountinfo)
        XCTAssertEqual(types, [812: "tmpfs", 813: "ext4", 840: "tmpfs", 841: "fuse.portal"])
        XCTAssertNil(ProcFS.filesystemTypes(mountinfo: "812 700 0:95 / / rw tmpfs tmpfs rw\n"), "no separator")
        XCTAssertEqual(ProcFS.filesystemTypes(mountinfo: ""), [:])
    }
}
