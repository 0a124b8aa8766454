import FoundationEssentials

/// Where refresh tokens live. The production adapter is `KeyringStore.LibsecretStore` (GNOME keyring over the
/// Secret Service); tests of broker logic use `MemorySecretStore` (Tests/AuthTestSupport). Implementations throw ``AuthError`` with
/// `keyringLocked`, `keyringUnavailable` or `keyringError`, never a silent "not found" for a locked keyring.
public protocol SecretStore: Sendable {
    /// The key's item: its secret and its dates (nil: no item, or a locked keyring that hides it).
    func loadItem(_ key: SecretKey) async throws(AuthError) -> KeyringItem?
    /// The keys that have an item, read without loading any secret. Only meaningful when ``state()`` is
    /// `available`: what a locked collection shows varies.
    func storedKeys() async throws(AuthError) -> Set<SecretKey>
    /// Writes the key's one item: replaces the secret of an existing item in one step (a rotation is never half
    /// done), and its dates (those not given are removed).
    func store(_ item: KeyringItem, for key: SecretKey) async throws(AuthError)
    /// Deletes the item; returns whether one existed.
    @discardableResult func delete(_ key: SecretKey) async throws(AuthError) -> Bool
    func state() async -> KeyringState
    /// The program that answers as the Secret Service, when the store can tell (nil: none, or unknown).
    func service() async -> KeyringService?
    /// The error for a store that ``state()`` calls `locked`, in the words of the Secret Service that answers.
    func lockedError() async -> AuthError
    /// One element each time the Secret Service appears, changes owner or says a property changed (an unlock), for
    /// as long as the caller iterates.
    func changes() -> AsyncStream<Void>
}

extension SecretStore {
    public func service() async -> KeyringService? { nil }
    public func lockedError() async -> AuthError { AuthError.keyringLocked() }
    public func changes() -> AsyncStream<Void> { AsyncStream { $0.finish() } }

    /// The key's secret alone, through ``loadItem(_:)``.
    public func load(_ key: SecretKey) async throws(AuthError) -> Secret? {
        try await loadItem(key)?.secret
    }

    /// An item of `secret` without dates.
    public func store(_ secret: Secret, for key: SecretKey) async throws(AuthError) {
        try await store(KeyringItem(secret: secret), for: key)
    }
}

/// Identifies one account's refresh token: the account name, issuer and client, so a changed issuer or client
/// never picks up a stale token.
public struct SecretKey: Sendable, Hashable {
    public var account: String
    public var issuer: String
    public var clientID: String
    public init(account: String, issuer: String, clientID: String) {
        self.account = account
        self.issuer = issuer
        self.clientID = clientID
    }
    public init(_ config: AccountConfig) {
        self.init(account: config.name, issuer: config.issuer.absoluteString, clientID: config.clientID)
    }
}

/// HTTP to the authorization server. Adapters throw `serverUnreachable` for network failures and time-outs and
/// return every HTTP reply (any status) as an ``HTTPReply``.
public protocol HTTPTransport: Sendable {
    func get(_ url: URL) async throws(AuthError) -> HTTPReply
    /// A form POST; `headers` are added to the request (a DPoP proof).
    func postForm(_ url: URL, fields: [(String, String)], basicAuth: (user: String, password: Secret)?,
                  headers: [(String, String)]) async throws(AuthError) -> HTTPReply
}

extension HTTPTransport {
    public func postForm(_ url: URL, fields: [(String, String)],
                         basicAuth: (user: String, password: Secret)?) async throws(AuthError) -> HTTPReply {
        try await postForm(url, fields: fields, basicAuth: basicAuth, headers: [])
    }
}

/// Opens the loopback redirect listener for one sign-in.
public protocol RedirectListenerFactory: Sendable {
    /// Binds `host` (or, when this machine has no loopback of that family, the other literal) on `port`
    /// (0 = ephemeral) and calls `judge` for each request on exactly `path`.
    func listen(host: LoopbackHost, port: UInt16, path: String, judge: @escaping @Sendable (_ query: String?) -> RedirectPage) async throws(AuthError) -> any RedirectListener
}

public protocol RedirectListener: Sendable {
    /// `http://127.0.0.1:PORT/path` or `http://[::1]:PORT/path`: the literal actually bound.
    var redirectURI: String { get }
    func close() async
}

/// The static page the listener shows the browser. No page echoes anything from the request.
public enum RedirectPage: Sendable, Equatable {
    case success, denied, invalid
}

/// Starts the user's browser on a URL, without a shell.
public protocol BrowserLauncher: Sendable {
    /// Async because a launcher may ask another process (the xdg-desktop-portal) and wait for its answer.
    func open(_ url: URL) async throws(AuthError)
    /// Which program ``open(_:)`` would start, for diagnostics (`authctl doctor`). Nothing is started.
    func locate() -> BrowserLocation
}

extension BrowserLauncher {
    public func locate() -> BrowserLocation { BrowserLocation(program: nil, source: nil, problem: "this launcher cannot say") }
}

/// The browser program a launcher would start (`program`, and `source`: where its name came from), or `problem`;
/// and the display it would open on, as the started browser will see it (`displaySource` says whose environment
/// that is: the user manager's, the agent's own; nil when the launcher cannot say, as with the portal).
public struct BrowserLocation: Sendable, Equatable {
    public var program: String?
    public var source: String?
    public var problem: String?
    public var display: String?
    public var waylandDisplay: String?
    public var displaySource: String?
    /// ``displaySource`` of a browser started through `systemd-run --user`.
    public static let userManager = "user manager"
    public init(program: String?, source: String?, problem: String?, display: String? = nil,
                waylandDisplay: String? = nil, displaySource: String? = nil) {
        self.program = program
        self.source = source
        self.problem = problem
        self.display = display
        self.waylandDisplay = waylandDisplay
        self.displaySource = displaySource
    }
}

/// The clock, for reading the time and for every timeout and wait of the broker. Production uses `ContinuousClock`
/// (CLOCK_BOOTTIME on Linux: it counts suspended time) so expiry is right after a laptop sleeps; tests inject a
/// manual clock and never wait in real time.
public protocol TimeSource: Sendable {
    func now() -> ContinuousClock.Instant
    func wallClock() -> Date
    /// Suspends until `deadline` on this clock; throws `CancellationError` when the task is cancelled first.
    func sleep(until deadline: ContinuousClock.Instant) async throws
}

extension TimeSource {
    public func sleep(for duration: Duration) async throws {
        try await sleep(until: now() + duration)
    }

    /// `body`'s result, or `fallback` if it takes longer than `limit` on this clock (the body is then cancelled).
    public func within<T: Sendable>(_ limit: Duration, fallback: T, _ body: @escaping @Sendable () async -> T) async -> T {
        await withTaskGroup(of: T?.self) { group in
            group.addTask { await body() }
            group.addTask {
                try? await self.sleep(for: limit)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? fallback
        }
    }
}

public struct SystemTimeSource: TimeSource {
    public init() {}
    public func now() -> ContinuousClock.Instant { ContinuousClock.now }
    public func wallClock() -> Date { Date() }
    public func sleep(until deadline: ContinuousClock.Instant) async throws {
        try await ContinuousClock().sleep(until: deadline)
    }
}
