@testable import AuthTransport
import XCTest

/// BoringSSL's reason code in a TLS failure's text (found without Foundation's regular expressions).
final class TLSDescriptionTests: XCTestCase {
    struct Failure: Error, CustomStringConvertible { let description: String }

    func testReasonCodeIsTakenFromTheErrorText() {
        let verify = Failure(description: "handshakeFailed(sslError: [Error: 268435581 error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED at /src/ssl/handshake.cc:299])")
        XCTAssertEqual(HTTPClientTransport.describeTLS(verify),
                       "the server's certificate does not verify against the system's trusted CAs (CERTIFICATE_VERIFY_FAILED)")
        let other = Failure(description: "error:10000410:SSL routines:OPENSSL_internal:SSLV3_ALERT_HANDSHAKE_FAILURE at x.cc:1")
        XCTAssertEqual(HTTPClientTransport.describeTLS(other), "the TLS handshake failed (SSLV3_ALERT_HANDSHAKE_FAILURE)")
        // The first marker followed by a code counts; a bare marker or lower-case text is no code.
        let second = Failure(description: "OPENSSL_internal: then OPENSSL_internal:WRONG_VERSION_NUMBER2_x")
        XCTAssertEqual(HTTPClientTransport.describeTLS(second), "the TLS handshake failed (WRONG_VERSION_NUMBER2_)")
        XCTAssertEqual(HTTPClientTransport.describeTLS(Failure(description: "OPENSSL_internal:lower")), "the TLS handshake failed")
        XCTAssertEqual(HTTPClientTransport.describeTLS(Failure(description: "eof")), "the TLS handshake failed")
    }
}
