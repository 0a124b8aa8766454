import FoundationEssentials

/// The answer of a device authorization endpoint (RFC 8628 §3.2), validated.
public struct DeviceAuthorization: Sendable {
    /// Sent back when polling; never shown or logged.
    public var deviceCode: Secret
    /// What the person types at ``verificationURI``: printable ASCII, at most 64 characters.
    public var userCode: String
    public var verificationURI: URL
    /// The verification URI with the user code in it, when the server offers one.
    public var verificationURIComplete: URL?
    public var expiresIn: Int
    /// The server's minimum polling interval, when it gave one (RFC 8628 §3.2; default 5 s).
    public var interval: Int?

    public init(deviceCode: Secret, userCode: String, verificationURI: URL, verificationURIComplete: URL? = nil,
                expiresIn: Int, interval: Int? = nil) {
        self.deviceCode = deviceCode
        self.userCode = userCode
        self.verificationURI = verificationURI
        self.verificationURIComplete = verificationURIComplete
        self.expiresIn = expiresIn
        self.interval = interval
    }

    /// The longest a device code is waited for, whatever the server says (a day).
    public static let maximumExpiresIn = 24 * 3600
    /// The longest polling interval accepted from a server (beyond this the sign-in would feel hung).
    public static let maximumInterval = 300

    /// Parses and checks a device authorization response. Verification URIs must pass ``EndpointPolicy`` (the
    /// person is told to open them, so they get the same https rule as any endpoint).
    public static func parse(_ reply: HTTPReply) throws(AuthError) -> DeviceAuthorization {
        guard (200..<300).contains(reply.status) else {
            let error = TokenResponseParser.error(from: reply, endpoint: "device authorization endpoint")
            if error.code == .serverError || error.code == .invalidClient { throw error }
            throw AuthError(.loginFailed, "the device authorization endpoint refused the request (\(error.message))")
        }
        func fail(_ detail: String) -> AuthError {
            AuthError(.invalidTokenResponse, "the device authorization response \(detail)")
        }
        let body: Body
        do {
            body = try JSONValue.decode(Body.self, from: reply.body)
        } catch let duplicate as DuplicateJSONMember {
            throw fail("names the member '\(duplicate.name)' more than once")
        } catch {
            throw fail("is not a JSON object with the fields of RFC 8628 §3.2")
        }
        guard let deviceCode = body.device_code, !deviceCode.isEmpty else { throw fail("has no device_code") }
        guard let userCode = body.user_code, !userCode.isEmpty, userCode.count <= 64,
              userCode.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
            throw fail("has no user_code of printable characters")
        }
        func uri(_ key: String, _ value: String?) throws(AuthError) -> URL? {
            guard let value else { return nil }
            switch EndpointPolicy.validate(value) {
            case .success(let url): return url
            case .failure(let rejection): throw fail("has a '\(key)' that \(rejection.reason)")
            }
        }
        // `verification_url` is what some providers (Google) send instead of the RFC's name.
        guard let verification = try uri("verification_uri", body.verification_uri ?? body.verification_url) else {
            throw fail("has no verification_uri")
        }
        guard let expiresIn = body.expires_in?.value, expiresIn > 0 else { throw fail("has no positive expires_in") }
        let interval = body.interval?.value
        guard (interval ?? 0) >= 0, (interval ?? 0) <= maximumInterval else {
            throw fail("has an interval outside 0...\(maximumInterval) s")
        }
        return DeviceAuthorization(
            deviceCode: Secret(deviceCode), userCode: userCode, verificationURI: verification,
            verificationURIComplete: try uri("verification_uri_complete", body.verification_uri_complete),
            expiresIn: min(expiresIn, maximumExpiresIn), interval: interval)
    }

    private struct Body: Decodable {
        var device_code: String?
        var user_code: String?
        var verification_uri: String?
        var verification_uri_complete: String?
        var verification_url: String?
        var expires_in: TokenResponseParser.LenientInt?
        var interval: TokenResponseParser.LenientInt?
    }
}
