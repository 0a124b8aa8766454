// auth-agent: the composition root. Parses options, loads the configuration, hardens the process, takes or binds
// the socket, wires the adapters into the TokenBroker, signals readiness to systemd and runs until SIGTERM.
import AgentService
import AgentRuntime
import AgentConfig
import AgentDBus
import AgentIPC
import AgentLifecycle
import AgentServer
import AgentAccess
import ArgumentParser
import AuthCore
import AuthTransport
import CAgentProcess
import FoundationEssentials
import KeyringStore
import Logging
import ServiceLifecycle
import SystemdSupport
import TPMKeys
import Glibc

let agentVersion = "0.1.0"

@main
struct AuthAgent: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "auth-agent",
        abstract: "Per-user OAuth 2.0 credential agent: signs in through your browser, keeps refresh tokens in the keyring and serves fresh access tokens over a Unix socket.",
        discussion: """
        Configuration: --config, else $AUTH_AGENT_CONFIG, else \
        $XDG_CONFIG_HOME/auth-agent/config.toml.

        Socket: taken from systemd (LISTEN_FDS) when socket-activated, else \
        $AUTH_AGENT_SOCKET, else $XDG_RUNTIME_DIR/auth-agent/agent.sock.

        Logs go to stderr, or to the journal with structured fields when stderr is \
        the journal (a systemd unit).
        """,
        version: agentVersion)

    @Option(name: .long, help: "Path of config.toml.")
    var config: String?

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical (overrides the config).")
    var logLevel: String?

    @Flag(name: .long, help: "Check the configuration, print a summary and exit.")
    var checkConfig = false

    /// ArgumentParser's entry point, after one setting that must come before any other thread allocates.
    ///
    /// One malloc arena for the whole process (docs/BENCHMARKS.md, "Memory"): glibc otherwise gives each thread that
    /// allocates an arena of its own, up to 8 per core, and never returns them. `run()` already runs on the
    /// cooperative pool, whose first thread has its arena by then, so the cap is set here, on the main thread,
    /// before the first task.
    static func main() async {
        _ = aa_process_limit_malloc_arenas(1)
        // tpm2-tss writes its own ERROR/WARNING lines to stderr (the journal) for every TPM call that fails, which the
        // agent reports itself, in words (TPMKeys.TPMFailure); a TSS2_LOG already set is kept, for debugging. Set
        // before any thread runs: tpm2-tss reads it at its first log line.
        setenv("TSS2_LOG", "all+NONE", 0)
        await main(nil)
    }

    func run() async throws {
        ProcessHardening.apply()
        let environment = ProcessInfo.processInfo.environment

        guard let (path, explicit) = AgentConfiguration.defaultPath(explicit: config, environment: environment) else {
            fail("cannot find a configuration path: set HOME, XDG_CONFIG_HOME or use --config", code: 78)
        }
        // An invalid file does not stop the agent: under socket activation an exit would loop on restarts, leave
        // clients hanging and end with a dead socket. It serves `config_error` instead until the file is fixed.
        let loaded = Result { () throws(ConfigError) in try ConfigLoader.load(path: path, explicit: explicit) }
        if checkConfig {
            switch loaded {
            case .success(let configuration):
                print("\(configuration.path): \(configuration.accounts.count) account(s)")
                for account in configuration.accounts {
                    print("  \(account.name): issuer \(account.issuer.absoluteString), redirect URI \(account.registeredRedirectURI)")
                }
                return
            case .failure(let error):
                fail("configuration error: \(error)", code: 78)
            }
        }
        let configuration = (try? loaded.get()) ?? AgentConfiguration(path: path, accounts: [])

        let level = Logger.Level(rawValue: logLevel ?? configuration.logLevel ?? "info") ?? .info
        // Under systemd (stderr connected to the journal) entries go to the journal with structured fields;
        // otherwise plain lines on stderr.
        let toJournal = JournalStream.isStderrJournal()
        LoggingSystem.bootstrap { label in
            if toJournal { return JournalLogHandler(identifier: "auth-agent", level: level) }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "auth-agent")
        if case .failure(let error) = loaded {
            logger.error("configuration error: \(error.description); every request gets config_error until the file is fixed",
                         metadata: ["path": "\(path)"])
        }
        if configuration.fileMissing {
            logger.warning("no configuration file; running with no accounts", metadata: ["path": "\(configuration.path)"])
        }

        let runtime: String
        do {
            runtime = try RuntimeDirectory.validate(environment: environment)
        } catch {
            fail(error.message, code: 1)
        }
        let socketPath = SocketPath.resolve(environment: environment) ?? SocketPath.defaultPath(runtimeDirectory: runtime)

        let http = HTTPClientTransport(userAgent: "auth-agent/\(agentVersion)",
                                       timeout: .seconds(configuration.httpTimeout.components.seconds))
        let broker = TokenBroker(
            accounts: configuration.accounts, store: LibsecretStore(), storeChoice: configuration.store, http: http,
            redirects: LoopbackRedirectListenerFactory(), browser: PortalBrowserLauncher(fallback: ExecBrowserLauncher(environment: environment, logger: logger), logger: logger),
            keyHolder: TPMKeyHolder(tcti: configuration.tpmTCTI), logger: logger)
        let access = AccessGate(
            policies: Dictionary(configuration.accounts.map { ($0.name, $0.access) }, uniquingKeysWith: { first, _ in first }),
            consentTimeout: configuration.consentTimeout,
            store: ConsentStore(path: ConsentStore.defaultPath(environment: environment)), logger: logger)
        let source = ConfigFileSource(path: path, explicit: explicit, initial: loaded, broker: broker, access: access,
                                      logger: logger)
        let configurationGate = ConfigurationGate(
            source: source, problem: loaded.failure.map(ConfigFileSource.wireError),
            onChange: { broker.announceConfigurationChange() })
        // The one service every front end calls (the socket's dispatcher, the D-Bus object, SIGHUP).
        let operations = AgentOperations(
            broker: broker,
            info: AgentInfo(version: agentVersion, pid: Int(getpid()), startedAt: .now, socketPath: socketPath,
                            hostname: AgentInfo.hostname()),
            access: access, configuration: configurationGate, logger: logger)
        let dispatcher = RequestDispatcher(operations: operations)

        let server: SocketServer
        let activity = ActivityTracker()
        // When the last client has gone, hand the heap the load left behind back to the kernel, and unmap the code
        // and read-only data pages the work mapped: they stay in the page cache, and the next request maps what it
        // uses again (docs/BENCHMARKS.md, "Memory").
        let trimHeap: IdleHook = {
            _ = aa_process_trim_heap()
            _ = aa_process_release_read_only_pages()
        }
        var socketActivated = false
        do {
            let inherited = try ListenFDs.take()
            if let fd = inherited.first {
                logger.info("using the socket passed by systemd", metadata: ["fd": "\(fd)"])
                socketActivated = true
                server = try await SocketServer.listen(.inherited(fd: fd), dispatcher: dispatcher, logger: logger,
                                                       activity: activity, whenIdle: trimHeap)
            } else {
                try RuntimeDirectory.prepareSocketDirectory(for: socketPath)
                try RuntimeDirectory.removeStaleSocket(at: socketPath)
                server = try await SocketServer.listen(.path(socketPath), dispatcher: dispatcher, logger: logger,
                                                       activity: activity, whenIdle: trimHeap)
            }
        } catch let error as ServerError {
            fail(error.message, code: 1)
        } catch {
            fail("cannot listen on \(socketPath): \(error)", code: 1)
        }

        logger.info("ready", metadata: ["socket": "\(socketPath)", "accounts": "\(configuration.accounts.count)",
                                        "version": "\(agentVersion)"])
        _ = SystemdNotifier.ready(status: loaded.failure.map { "Configuration error: \($0.description)" }
                                  ?? "Serving \(configuration.accounts.count) account(s) on \(socketPath)")

        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: UntilShutdown({ await server.serve() }, onShutdown: { server.shutdown() })),
            .init(service: UntilShutdown { await broker.runProactiveRefresh(afterRound: { server.workFinished() }) }),
            .init(service: UntilShutdown { await broker.runSignInLifetimeWatch() }),
            // The Secret Service's arrival and changes, as its adapter hears them: held sign-ins move into it (ends at
            // once with `store = "memory"`).
            .init(service: UntilShutdown { await broker.followSecretService() }, successTerminationBehavior: .ignore),
            // Optional: without a session bus it logs one warning and ends; the socket goes on serving.
            .init(service: DBusService(operations: operations, activity: activity,
                                       notifications: configuration.notifications, logger: logger),
                  successTerminationBehavior: .ignore, failureTerminationBehavior: .ignore),
            // Optional too: resume and network-up hooks from logind and NetworkManager, when a system bus exists.
            .init(service: SystemBusWatcher(broker: broker, sessionLock: operations.access.sessionLock, logger: logger),
                  successTerminationBehavior: .ignore, failureTerminationBehavior: .ignore),
            // SIGHUP (`systemctl --user reload auth-agent`): the same reload as `authctl reload`.
            .init(service: ReloadOnHangup(operations: operations, logger: logger)),
        ]
        // Only when systemd holds the socket: it starts the agent again on the next connection.
        if socketActivated, configuration.idleExit > .zero {
            services.append(.init(service: IdleExitService(timeout: configuration.idleExit, activity: activity,
                                                           broker: broker, grants: operations.grants, logger: logger),
                                  successTerminationBehavior: .gracefullyShutdownGroup))
        }
        if let interval = SystemdNotifier.watchdogInterval() {
            logger.info("watchdog enabled", metadata: ["interval": "\(interval)"])
            services.append(.init(service: WatchdogService(interval: interval, broker: broker,
                                                          server: ProbedLoop(probe: { server.probe($0) }, answered: { server.answeredProbe }),
                                                          logger: logger) {
                _ = SystemdNotifier.watchdog()
            }))
        }
        // A SIGTERM or SIGINT that came before the group trapped them (it traps them before it starts any service).
        services.append(.init(service: TerminationHeld(), successTerminationBehavior: .gracefullyShutdownGroup))
        // Last, so it is the first to hear of a shutdown (the group stops services in reverse order): STOPPING=1 goes
        // out at once, while the others finish their work.
        services.append(.init(service: StatusReporter(broker: broker, configProblem: { configurationGate.currentProblem?.message }) {
            _ = SystemdNotifier.notify($0)
        }))
        var groupConfiguration = ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        // Bounded: a service that does not finish within these is cancelled, then abandoned, so the agent always
        // exits well inside systemd's 90 s stop timeout (whose SIGKILL would cut a keyring write mid-way).
        groupConfiguration.maximumGracefulShutdownDuration = .seconds(20)
        groupConfiguration.maximumCancellationDuration = .seconds(5)
        let group = ServiceGroup(configuration: groupConfiguration)
        do {
            try await group.run()
        } catch {
            logger.error("agent stopped with an error", metadata: ["error": "\(error)"])
        }
        await broker.drain()
        await http.shutdown()
        logger.info("stopped")
    }

    /// A fatal error, before logging is set up: one line on stderr. When stderr is the journal's stream, the line
    /// starts with the syslog priority prefix `<3>` (journald reads it: `journalctl -p err` shows the line, which
    /// would otherwise be filed at the stream's default, info).
    func fail(_ message: String, code: Int32) -> Never {
        let priority = JournalStream.isStderrJournal() ? "<3>" : ""
        let line = Array("\(priority)auth-agent: \(message)\n".utf8)
        _ = line.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
        Glibc.exit(code)
    }
}

/// Process-wide protections that must be in place before any secret exists (SECURITY.md 22, 23).
enum ProcessHardening {
    static func apply() {
        // Not dumpable: no core dumps, and other same-user processes cannot ptrace us or read /proc/PID/mem.
        _ = aa_process_set_not_dumpable()
        var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
        _ = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &noCore)
        // Swift's crash backtracer catches these signals and prints every thread's registers, with bytes of the
        // memory they point to (which may hold a token), to stderr, i.e. the journal; it then takes seconds, and
        // after a SIGSEGV sent with kill(2) the agent even ran on. Unless the user asks for backtraces with
        // SWIFT_BACKTRACE, a crash signal keeps its default action: the process dies at once and, being not
        // dumpable with RLIMIT_CORE 0, leaves no core file (SECURITY.md 20, 23).
        if getenv("SWIFT_BACKTRACE") == nil {
            for crash in [SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGABRT] { signal(crash, SIG_DFL) }
        }
        // A client that vanishes mid-reply must not kill us.
        signal(SIGPIPE, SIG_IGN)
        // A stop request before the service group traps SIGTERM (it does when it runs, after the socket is ready) is
        // held, not the default action's instant death; TerminationHeld turns it into the group's graceful shutdown.
        aa_process_hold_termination()
        umask(0o077)
        // Room for many clients: the soft open-file limit (often 1024) up to the hard one. SocketServer caps its
        // connections below whatever this ends up being, closing the longest-idle one when full.
        var files = rlimit()
        if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &files) == 0, files.rlim_cur < files.rlim_max {
            files.rlim_cur = files.rlim_max
            _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &files)
        }
    }
}

/// Ends the service group gracefully at once when a stop request came before the group trapped SIGTERM and SIGINT
/// (``ProcessHardening``: `aa_process_hold_termination`); otherwise waits for the group's own shutdown.
struct TerminationHeld: Service {
    func run() async throws {
        if aa_process_termination_held() == 1 { return }
        try? await gracefulShutdown()
    }
}
