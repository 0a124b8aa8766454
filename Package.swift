// swift-tools-version:6.0
import PackageDescription

// Module boundaries (see docs/ARCHITECTURE.md):
//   AuthCore       pure domain + ports; no NIO, no C (ID token signatures via jwt-kit over swift-crypto).
//   AuthTransport  HTTP (AsyncHTTPClient), the loopback redirect listener (NIOHTTP1) and the browser launchers
//                  (exec; the xdg-desktop-portal over CAgentBus's sd-bus calls).
//   KeyringStore   SecretStore over libsecret (CLibsecret shim).
//   TPMKeys        KeyHolder over the TPM through tpm2-tss (CAgentTPM shim): DPoP keys held by the TPM (`dpop_key`).
//   SystemdSupport sd_notify / sd_listen_fds (CSystemd shim).
//   AgentIPC       the versioned socket protocol + a small blocking client; shared by daemon and CLI.
//   AgentConfig    the agent's configuration: config.toml -> AuthCore.AccountConfig with file/line errors, and the
//                  reload that puts a new file in force (ConfigurationGate, ConfigFileSource).
//   AgentAccess    who asks and what they may have: caller identity, the access gate, consent, audit, forwards.
//   AgentService   the one service both front ends call (AgentOperations).  AgentRuntime: the agent's threads.
//   AgentServer    the socket front end: the accept loop, connection lifecycle, dispatch.
//   CAgentBus      the D-Bus vtable and sd-bus's variadic calls (the portal's too), in C.  AgentDBus: the D-Bus
//                  front end.
//   AuthCLI        authctl's pure formats: git credential input/output, kubectl ExecCredential, doctor's verdicts,
//                  provider presets and config sections (no I/O).
//   SessionEnvironment  what agent and authctl must read the same way from the session: the browser command,
//                  SSH/headless.  ConfigFile: where config.toml is, how its table headers read, and GLib key
//                  files (a sandbox's `/.flatpak-info`).  TimeText: times as people read and write them (days
//                  left, "15m", the local clock).  ProcessTree: /proc as both read it (stat, exe) and the walk up
//                  through shells.  All four without Foundation, so authctl stays light.
//   auth-agent     composition root.  authctl: thin CLI over AgentIPC and AuthCLI.
// Figure: installed size (docs/BENCHMARKS.md, "Installed size"). Both release binaries contain FoundationEssentials,
// never full Foundation, CoreFoundation, FoundationInternationalization or ICU (45 MB of the agent, 34 MB of it ICU's
// data). Nothing we ship needs them, but TOMLKit's `import struct Foundation.Data` puts -lFoundation on the agent's
// link line ahead of -lFoundationEssentials, and lld takes a generic specialization that both archives define from
// the first, Foundation's, which pulls in the rest. lld's --remap-inputs gives it an empty linker script in place of
// those archives, so FoundationEssentials' copies are used, and a real use of full Foundation fails to link instead
// of growing the binary unseen. Release only (the debug build links shared libraries, where nothing grows): the same
// refusal is checked against the debug binaries by Tests/ReleaseLinkTests, so a debug build and `swift test` fail
// where the release link would.
// The other half of the installed size is not here: Package.swift cannot give flags to another package's targets, so
// the release build takes them from a toolset (packaging/release-toolset.json, the Makefile's RELEASE_TOOLSET): every
// module, the dependencies' too, compiled with each function in a section of its own and Swift's public functions not
// retained by default, so that --gc-sections drops what neither program calls.
let essentialsOnly = ["libFoundation.a", "libCoreFoundation.a", "libFoundationInternationalization.a", "lib_FoundationICU.a"]
    .flatMap { ["-Xlinker", "--remap-inputs=*/\($0)=\(Context.packageDirectory)/packaging/link/empty.ld"] }

// Figure: installed size, as essentialsOnly. Both release links run lld through packaging/link/lld-without-swift-unwind-
// tables, which hands it the Swift objects and the Swift runtime's archives without their DWARF unwind tables (4.4 MB
// of the agent, 1.7 MB of authctl, read by nothing: the script says why); C and C++ objects keep theirs.
let swiftWithoutUnwindTables = ["-ld-path=\(Context.packageDirectory)/packaging/link/lld-without-swift-unwind-tables"]

// Figure: authctl whole-process time (docs/BENCHMARKS.md, "`authctl token`"), paid by the release authctl only, so
// release only. authctl's own modules get generic types' metadata through the compiler's direct accessors, which
// pass the witness tables they know, not by mangled name (the compiler's default, for size). From a mangled name the
// runtime proves each generic requirement again (`TokenResult.CodingKeys: CodingKey` for the reply's
// `KeyedDecodingContainer`), and its first proof of a type and protocol scans every conformance record of the static
// binary: over a third of what `authctl token` ran, on every git, mail and kubectl use.
let directMetadata: [SwiftSetting] = [
    .unsafeFlags(["-Xfrontend", "-disable-concrete-type-metadata-mangled-name-accessors"], .when(configuration: .release)),
]

let package = Package(
    name: "auth-agent",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "auth-agent", targets: ["auth-agent"]),
        .executable(name: "authctl", targets: ["authctl"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),  // already under async-http-client; named for tls_error
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        // jwt-kit 5 needs swift-crypto 4.
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.1.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/LebJe/TOMLKit.git", from: "0.6.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
    ],
    targets: [
        .target(
            name: "AuthCore",
            dependencies: [
                "TimeText",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "AuthTransport",
            dependencies: [
                "AuthCore", "SessionEnvironment", "CAgentProcess", "CAgentBus",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .systemLibrary(name: "CLibsecret", pkgConfig: "libsecret-1", providers: [.apt(["libsecret-1-dev"])]),
        .target(name: "KeyringStore", dependencies: ["AuthCore", "CLibsecret"]),
        // DPoP keys held by the TPM (`dpop_key`): tpm2-tss's ESYS behind a small C API (CAgentTPM), and the KeyHolder
        // over it (TPMKeys). Linked into auth-agent only.
        .target(name: "CAgentTPM", linkerSettings: [.linkedLibrary("tss2-esys"), .linkedLibrary("tss2-tctildr"),
                                                    .linkedLibrary("tss2-mu"), .linkedLibrary("tss2-rc")]),
        .target(name: "TPMKeys", dependencies: ["AuthCore", "CAgentTPM"]),
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        .target(name: "SystemdSupport", dependencies: ["CSystemd", .product(name: "Logging", package: "swift-log")]),
        .target(name: "AgentIPC", swiftSettings: directMetadata),
        .target(name: "SessionEnvironment", swiftSettings: directMetadata),
        .target(name: "ConfigFile", swiftSettings: directMetadata),
        .target(name: "TimeText", swiftSettings: directMetadata),
        // The /proc reading and the walk up through shells that the agent and authctl on a host share.
        .target(name: "ProcessTree", swiftSettings: directMetadata),
        .target(name: "AuthCLI", dependencies: ["AgentIPC", "ConfigFile"], swiftSettings: directMetadata),
        .target(name: "CAgentProcess"),
        .target(name: "CAgentSocket"),
        // A loop thread's eventfd wake-up and monotonic clock: the accept loop's and the D-Bus bus loop's.
        .target(name: "CAgentLoop"),
        .target(name: "CProcFS"),
        .target(
            name: "AgentConfig",
            dependencies: ["AuthCore", "AgentAccess", "AgentIPC", "ConfigFile", "TimeText", "CProcFS",
                           .product(name: "TOMLKit", package: "TOMLKit"), .product(name: "Logging", package: "swift-log")]
        ),
        .target(
            name: "AgentAccess",
            dependencies: [
                "AuthCore", "AgentIPC", "ConfigFile", "ProcessTree", "CAgentSocket", "CProcFS", "CAgentProcess",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The agent's own threads and the count of work in flight its idle exit reads.
        .target(name: "AgentRuntime", dependencies: ["CAgentProcess"]),
        // The one service every front end calls (AgentOperations), over the broker and the access gate.
        .target(name: "AgentService", dependencies: ["AgentConfig", "AgentAccess", "AuthCore", "AgentIPC", .product(name: "Logging", package: "swift-log")]),
        .target(
            name: "AgentServer",
            dependencies: [
                "AgentService", "AgentAccess", "AgentRuntime", "AuthCore", "AgentIPC", "CAgentSocket", "CAgentLoop",
                "CAgentProcess", .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The agent's lifecycle services: proactive refresh, sign-in lifetime, watchdog, status, idle exit, SIGHUP.
        .target(
            name: "AgentLifecycle",
            dependencies: [
                "AgentService", "AgentRuntime", "AuthCore", "AgentIPC",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        // sd-bus's vtable macros and variadic calls, which Swift cannot use (sd-bus.h comes from libsystemd-dev).
        .target(name: "CAgentBus", linkerSettings: [.linkedLibrary("systemd")]),
        .target(
            name: "AgentDBus",
            dependencies: [
                "AgentService", "AgentAccess", "AgentRuntime", "AgentIPC", "AuthCore", "CAgentBus", "CAgentLoop", "TimeText",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "auth-agent",
            dependencies: [
                "AuthCore", "AuthTransport", "KeyringStore", "TPMKeys", "SystemdSupport", "AgentConfig", "AgentAccess", "AgentService",
                "AgentRuntime", "AgentServer", "AgentLifecycle", "AgentDBus",
                "CAgentProcess",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            // Figure: agent memory (docs/BENCHMARKS.md, section 7 and "Memory"): idle RSS is mostly the file pages of
            // touched code. Release only (the tests' debug build stays dynamic):
            // - the Swift runtime and FoundationEssentials linked in (-static-stdlib), so their code is not mapped from
            //   shared libraries; our modules were compiled against the shared runtime, whose module maps do not name
            //   FoundationEssentials' own static dependencies, hence the -l. libsecret, glib and libsystemd stay shared;
            // - lld (in the Swift toolchain) with packed relative relocations (DT_RELR, glibc >= 2.36): the PIE's
            //   3 MB of RELA entries, all read at start-up, become 25 kB;
            // - --no-export-dynamic undoes -static-stdlib's -export-dynamic: no 2 MB dynamic symbol table, and
            //   --gc-sections may drop what nothing calls.
            // essentialsOnly and swiftWithoutUnwindTables are for the installed size (above).
            linkerSettings: [
                .unsafeFlags(["-static-stdlib", "-use-ld=lld",
                              "-Xlinker", "--gc-sections", "-Xlinker", "--no-export-dynamic",
                              "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
                              "-l_FoundationCShims", "-l_FoundationCollections", "-lswiftSynchronization"] + essentialsOnly
                              + swiftWithoutUnwindTables,
                             .when(configuration: .release)),
            ]
        ),
        .executableTarget(
            name: "authctl",
            dependencies: ["AgentIPC", "AuthCLI", "SessionEnvironment", "ConfigFile", "TimeText", "ProcessTree", "CAgentProcess",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: directMetadata,
            // Figure: authctl whole-process time (docs/BENCHMARKS.md, figure 3). Start-up is most of `authctl token`:
            // a fully static release binary has no dynamic loader, no shared libraries and no relocations to process (-static-stdlib alone still loads libstdc++ and relocates the
            // PIE). authctl uses no NSS or dlopen. lld (in the Swift toolchain) rather than gold lays out the same
            // code in fewer pages; a profiled symbol order on top gained nothing, because most of what runs is in the
            // standard library's and FoundationEssentials' few large .text sections, which the linker cannot reorder
            // inside. Figures: docs/BENCHMARKS.md, "`authctl token`".
            // FoundationEssentials' static archive does not name its own dependencies, hence the three -l. Release
            // only (the tests' debug build stays dynamic); the agent keeps its own flags; essentialsOnly and
            // swiftWithoutUnwindTables are for the installed size (above).
            linkerSettings: [
                .unsafeFlags(["-static-executable", "-use-ld=lld", "-Xlinker", "--gc-sections",
                              "-l_FoundationCollections", "-l_FoundationCShims", "-lswiftSynchronization"] + essentialsOnly
                              + swiftWithoutUnwindTables,
                             .when(configuration: .release)),
            ]
        ),
        // In-memory and refusing adapters shared by the unit tests (never linked into a product).
        .target(name: "AuthTestSupport", dependencies: ["AuthCore"], path: "Tests/AuthTestSupport"),
        .testTarget(
            name: "AuthCoreTests",
            dependencies: [
                "AuthCore", "AuthTestSupport",
                // Tests make their own keys and sign tokens with them.
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ]
        ),
        .testTarget(name: "AgentIPCTests", dependencies: ["AgentIPC"]),
        .testTarget(name: "AuthCLITests", dependencies: ["AuthCLI", "AgentIPC", "ConfigFile"]),
        .testTarget(name: "SessionEnvironmentTests", dependencies: ["SessionEnvironment"]),
        .testTarget(name: "TimeTextTests", dependencies: ["TimeText"]),
        .testTarget(name: "ProcessTreeTests", dependencies: ["ProcessTree"]),
        // authctl's fast path against ArgumentParser's reading of the same command lines.
        .testTarget(
            name: "authctlTests",
            dependencies: ["authctl", "AuthCLI", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .testTarget(name: "AgentConfigTests", dependencies: ["AgentConfig", "AuthCore", "AuthCLI", "AgentIPC"]),
        .testTarget(name: "KeyringStoreTests", dependencies: ["KeyringStore", "AuthCore"]),
        .testTarget(name: "TPMKeysTests", dependencies: ["TPMKeys", "AuthCore"]),
        .testTarget(name: "SystemdSupportTests", dependencies: ["SystemdSupport"]),
        .testTarget(name: "AgentDBusTests", dependencies: ["AgentDBus", "AgentService", "AgentAccess", "AgentIPC", "AuthCore", "AuthTestSupport"]),
        .testTarget(
            name: "AuthTransportTests",
            dependencies: ["AuthTransport", "AuthCore", .product(name: "NIOCore", package: "swift-nio"),
                           .product(name: "NIOPosix", package: "swift-nio")]
        ),
        .testTarget(
            name: "AgentServerTests",
            dependencies: ["AgentServer", "AgentService", "AgentAccess", "AgentIPC", "AuthCore", "AuthTestSupport", "CAgentProcess", "ProcessTree"]
        ),
        .testTarget(
            name: "AgentAccessTests",
            dependencies: ["AgentAccess", "AgentService", "AgentIPC", "AuthCore", "AuthTestSupport", "CAgentSocket", "ProcessTree"]
        ),
        .testTarget(name: "AgentServiceTests", dependencies: ["AgentService", "AgentAccess", "AgentIPC", "AuthCore", "AuthTestSupport"]),
        .testTarget(name: "AgentLifecycleTests", dependencies: ["AgentLifecycle", "AgentRuntime", "AuthCore"]),
        // The release link's refusal of full Foundation (essentialsOnly), checked against the debug binaries.
        .testTarget(name: "ReleaseLinkTests"),
        // Mutation fuzzing of the socket request decoder and the redirect request check (scripts/fuzz).
        .testTarget(
            name: "FuzzTests",
            dependencies: [
                "AgentServer", "AgentAccess", "AgentIPC", "AuthTransport", "AuthCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ]
        ),
    ]
)

// Figure: installed size, as essentialsOnly, and a check in every build (debug included), so it applies to every build
// of the shipped modules. They use FoundationEssentials only (essentialsOnly above). A dependency's `import struct
// Foundation.Data` would otherwise lend them Foundation's extensions (String's `contains`, `range(of:)`, ...), found
// only when the release link refuses them: with MemberImportVisibility a module sees only the members of what it
// imports itself, in every build. (Not the agent's two-file composition root: there Swift 6.3 files glibc's `struct
// stat` members under CoreFoundation.)
for target in package.targets where ["AuthCore", "AuthTransport", "KeyringStore", "TPMKeys", "SystemdSupport", "AgentIPC",
                                     "SessionEnvironment", "ConfigFile", "TimeText", "ProcessTree", "AuthCLI", "AgentConfig",
                                     "AgentAccess", "AgentService", "AgentRuntime", "AgentServer", "AgentLifecycle",
                                     "AgentDBus", "authctl"]
    .contains(target.name) {
    target.swiftSettings = (target.swiftSettings ?? []) + [.enableUpcomingFeature("MemberImportVisibility")]
}
