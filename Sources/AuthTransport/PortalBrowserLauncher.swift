import AuthCore
import CAgentBus
import Dispatch
import FoundationEssentials
import Logging
import Glibc

/// Opens the sign-in page through the xdg-desktop-portal (`org.freedesktop.portal.OpenURI.OpenURI` on the session
/// bus) when the portal is there, else through `fallback` (`$BROWSER`, else `xdg-open`: ``ExecBrowserLauncher``).
///
/// Why the portal first: the desktop starts the user's browser in the user's session, not as a child of the agent,
/// so the browser does not inherit the unit's seccomp filters, namespaces or environment (docs/ARCHITECTURE.md).
///
/// When the portal is absent (`ServiceUnknown`: no such name on the bus, nothing to activate) the fallback is used
/// silently; when it is present but fails (an error reply, a timeout, a broken bus) the fallback is used too, and
/// the failure is logged as a warning, since the user expected the portal to work. Once the portal has accepted the
/// request, `open` returns and nothing more is started (a chooser may stay up for minutes; authctl shows the URL): a
/// non-zero `Response` (chooser dismissed, URI not opened), awaited by the call's thread, is only logged.
public struct PortalBrowserLauncher: BrowserLauncher {
    /// The portal's bus name, as `authctl doctor` names it.
    public static let busName = "org.freedesktop.portal.Desktop"
    /// How `locate()` labels the portal in ``BrowserLocation/source``.
    public static let source = "xdg-desktop-portal"
    /// A portal that has not answered by then is treated as failed (it replies at once: the chooser comes later).
    public static let callTimeout: Duration = .seconds(5)
    /// How long an accepted request's `Response` is waited for: the default sign-in time limit (`login_timeout`),
    /// after which it would say nothing of use.
    public static let responseTimeout: Duration = .seconds(300)

    /// What one OpenURI call amounted to.
    public enum Outcome: Sendable {
        /// The portal accepted the request; `response` waits (blocking) for how it ended.
        case opened(response: @Sendable () -> Response)
        /// No portal on this bus (or no session bus at all).
        case absent(String)
        case failed(String)
    }

    /// How an accepted request ended: its `Response` signal's code, or why none came.
    public enum Response: Sendable, Equatable {
        /// 0: the portal opened the URI.
        case opened
        /// 1: the person dismissed the application chooser.
        case dismissed
        /// 2 (or anything else): the portal ended the request otherwise.
        case failed(UInt32)
        /// No `Response` within ``responseTimeout``, or the connection failed: nothing is known.
        case unknown(String)

        init(code: Int32) {
            switch code {
            case 0: self = .opened
            case 1: self = .dismissed
            case let code where code > 0: self = .failed(UInt32(code))
            default: self = .unknown(code == -ETIMEDOUT ? "no Response signal in time" : "error \(-code)")
            }
        }
    }

    let fallback: any BrowserLauncher
    let logger: Logger
    let call: @Sendable (String) -> Outcome
    let available: @Sendable () -> Bool

    public init(fallback: any BrowserLauncher, logger: Logger) {
        self.init(fallback: fallback, logger: logger,
                  call: { PortalBrowserLauncher.openURI($0, timeout: PortalBrowserLauncher.callTimeout) },
                  available: { aa_portal_available(PortalBrowserLauncher.microseconds(.seconds(2))) == 1 })
    }

    /// For tests: the bus call and the presence check injected.
    init(fallback: any BrowserLauncher, logger: Logger, call: @escaping @Sendable (String) -> Outcome,
         available: @escaping @Sendable () -> Bool) {
        self.fallback = fallback
        self.logger = logger
        self.call = call
        self.available = available
    }

    public func open(_ url: URL) async throws(AuthError) {
        // The exec launcher's rule (SECURITY.md 10): the portal hands the URL to whatever handles it.
        let text = try ExecBrowserLauncher.openable(url)
        let (call, logger) = (self.call, self.logger)
        // The call blocks (up to callTimeout), and an accepted request's Response is awaited after it (minutes, if the
        // chooser stays up): never on the broker's executor or an event loop, on a thread of the launch's own.
        let outcome = await withCheckedContinuation { continuation in
            DispatchQueue(label: "auth-portal").async {
                let outcome = call(text)
                guard case .opened(let response) = outcome else { return continuation.resume(returning: outcome) }
                logger.info("opened the sign-in page through the xdg-desktop-portal")
                continuation.resume(returning: outcome)
                switch response() {
                case .opened: return
                case .unknown(let why):
                    logger.debug("no answer from the xdg-desktop-portal about the sign-in page", metadata: ["reason": "\(why)"])
                case let ended:
                    logger.warning("the xdg-desktop-portal did not open the sign-in page",
                                   metadata: ["response": "\(ended == .dismissed ? "dismissed" : "\(ended)")"])
                }
            }
        }
        switch outcome {
        case .opened: return
        case .absent(let why):
            logger.debug("no xdg-desktop-portal; starting the browser directly", metadata: ["reason": "\(why)"])
        case .failed(let why):
            logger.warning("the xdg-desktop-portal could not open the sign-in page; starting the browser directly",
                           metadata: ["error": "\(why)"])
        }
        try await fallback.open(url)
    }

    public func locate() -> BrowserLocation {
        guard available() else {
            var location = fallback.locate()
            if location.displaySource == BrowserLocation.userManager {
                (location.display, location.waylandDisplay) = PortalBrowserLauncher.managerDisplay()
            }
            return location
        }
        return BrowserLocation(program: PortalBrowserLauncher.busName, source: PortalBrowserLauncher.source, problem: nil)
    }

    /// One blocking OpenURI call on a private session-bus connection, which an accepted request keeps open until
    /// its `Response` has been awaited.
    static func openURI(_ uri: String, timeout: Duration) -> Outcome {
        var name = [CChar](repeating: 0, count: 256)
        var message = [CChar](repeating: 0, count: 512)
        var request: OpaquePointer?
        let rc = aa_portal_open_uri(uri, microseconds(timeout), &request, &name, name.count, &message, message.count)
        if rc >= 0, let request {
            let pending = PortalRequest(raw: request)
            return .opened { pending.awaitResponse(timeout: responseTimeout) }
        }
        let errorName = String(cString: name)
        let detail = String(cString: message)
        if errorName.isEmpty || errorName == "org.freedesktop.DBus.Error.ServiceUnknown"
            || errorName == "org.freedesktop.DBus.Error.NameHasNoOwner" {
            return .absent(errorName.isEmpty ? "no session bus: \(detail)" : detail)
        }
        return .failed("\(errorName): \(detail)")
    }

    /// DISPLAY and WAYLAND_DISPLAY in the user manager's environment now: what a browser started with
    /// `systemd-run --user` gets (nil each when unset or unreadable).
    static func managerDisplay() -> (String?, String?) {
        var display = [CChar](repeating: 0, count: 256)
        var wayland = [CChar](repeating: 0, count: 256)
        guard aa_manager_display(microseconds(.seconds(2)), &display, display.count, &wayland, wayland.count) == 0 else {
            return (nil, nil)
        }
        func value(_ bytes: [CChar]) -> String? {
            let text = String(decoding: bytes.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return text.isEmpty ? nil : text
        }
        return (value(display), value(wayland))
    }

    static func microseconds(_ duration: Duration) -> UInt64 {
        UInt64(duration.components.seconds) * 1_000_000 + UInt64(duration.components.attoseconds / 1_000_000_000_000)
    }
}

/// An accepted OpenURI request and its private bus connection; awaited once, from one thread, then freed.
final class PortalRequest: @unchecked Sendable {
    private let raw: OpaquePointer
    init(raw: OpaquePointer) { self.raw = raw }
    deinit { aa_portal_request_free(raw) }

    func awaitResponse(timeout: Duration) -> PortalBrowserLauncher.Response {
        PortalBrowserLauncher.Response(code: aa_portal_await_response(raw, PortalBrowserLauncher.microseconds(timeout)))
    }
}
