import ArgumentParser
import AuthCLI
@testable import authctl
import XCTest

/// The fast path must never read a command line differently from ArgumentParser: every form it accepts must parse
/// with ArgumentParser (validate() included) to the same options. Forms it declines go to ArgumentParser unchanged,
/// so they need no check here; the e2e tests (test_cli.py) compare the two paths' output byte for byte.
final class FastPathParityTests: XCTestCase {
    /// ArgumentParser's reading of `authctl ARGUMENTS`, or nil if it refuses them (usage error, help, ...).
    private func argumentParser(_ arguments: [String]) -> ParsableCommand? { try? AuthCtl.parseAsRoot(arguments) }

    private func assertSameReading(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) {
        let rest = Array(arguments.dropFirst())
        switch arguments.first {
        case "token":
            guard let fast = TokenArguments.parse(rest) else { return }
            let slow = argumentParser(arguments) as? Token
            XCTAssertEqual(slow?.arguments, fast, "\(arguments)", file: file, line: line)
        case "git-credential":
            guard let fast = GitCredentialArguments.parse(rest) else { return }
            let slow = argumentParser(arguments) as? GitCredentialCommand
            XCTAssertEqual(slow?.arguments, fast, "\(arguments)", file: file, line: line)
        case "kube-credential":
            guard let fast = KubeCredentialArguments.parse(rest) else { return }
            let slow = argumentParser(arguments) as? KubeCredentialCommand
            XCTAssertEqual(slow?.arguments, fast, "\(arguments)", file: file, line: line)
        default:
            XCTFail("not a fast-path verb: \(arguments)", file: file, line: line)
        }
    }

    private func fastPathTakes(_ arguments: [String]) -> Bool {
        let rest = Array(arguments.dropFirst())
        switch arguments.first {
        case "token": return TokenArguments.parse(rest) != nil
        case "git-credential": return GitCredentialArguments.parse(rest) != nil
        case "kube-credential": return KubeCredentialArguments.parse(rest) != nil
        default: return false
        }
    }

    func testTheDocumentedFormsReadTheSame() {
        for arguments in [
            ["token", "work"], ["token", "work", "--header"], ["token", "work", "--json"], ["token", "work", "--id-token"],
            ["token", "work", "--min-valid", "600"], ["token", "--min-valid=600", "work"], ["token", "work", "--refresh"],
            ["token", "work", "--interactive"], ["token", "work", "--scope", "read", "--scope", "write admin"],
            ["token", "work", "--resource", "https://api.example.com/"], ["token", "--socket", "/tmp/a.sock", "work"],
            ["token", "work", "--header", "--method", "POST", "--url", "https://api.example.com/x"],
            ["token", "work", "--header", "--url", "https://api.example.com/x", "--dpop-nonce", "n-1"],
            ["git-credential", "get"], ["git-credential", "--account", "gitlab", "get"],
            ["git-credential", "--username", "x-access-token", "--min-valid", "0", "store"],
            ["kube-credential", "work"], ["kube-credential", "work", "--access-token"],
            ["kube-credential", "--min-valid", "300", "work"], ["kube-credential", "work", "--timeout=5"],
        ] {
            XCTAssertTrue(fastPathTakes(arguments), "the fast path should take \(arguments)")
            assertSameReading(arguments)
        }
    }

    /// Random command lines from pieces that are valid, invalid and borderline for both parsers.
    func testRandomCommandLinesNeverReadDifferently() {
        let tokenPieces = ["work", "other", "help", "", "-", "--", "-h", "--help", "--version", "--json", "--header",
                           "--id-token", "--refresh", "--interactive", "--json=true", "--bogus", "--min-valid", "5", "-5",
                           "+5", "--min-valid=7", "--min-valid=", "--scope", "read", "--scope=a b", "--resource",
                           "https://x.example/", "--resource=-x", "--socket", "/tmp/s.sock", "--socket=/tmp/t.sock", "a=b",
                           "--url", "https://api.example/x", "--method", "POST", "--dpop-nonce", "n1", "--url="]
        let gitPieces = ["get", "store", "erase", "help", "", "--", "--help", "--account", "gitlab", "--account=work",
                         "--username", "oauth2", "--username=x", "--min-valid", "0", "-1", "--min-valid=30", "--socket",
                         "/tmp/s.sock", "--json", "a\nb"]
        let kubePieces = ["work", "other", "help", "", "--", "--help", "--access-token", "--access-token=true",
                          "--min-valid", "0", "-1", "--min-valid=30", "--timeout", "5", "--timeout=0", "--socket",
                          "/tmp/s.sock", "--json", "--id-token"]
        var generator = SplitMix64(seed: 0x5EED_CAFE)
        var accepted = 0
        for _ in 0..<4000 {
            let (verb, pieces) = [("token", tokenPieces), ("git-credential", gitPieces),
                                  ("kube-credential", kubePieces)].randomElement(using: &generator)!
            let count = Int.random(in: 0...5, using: &generator)
            let arguments = [verb] + (0..<count).map { _ in pieces.randomElement(using: &generator)! }
            if fastPathTakes(arguments) { accepted += 1 }
            assertSameReading(arguments)
        }
        XCTAssertGreaterThan(accepted, 200, "the random lines should exercise the fast path, not only its refusals")
    }
}

/// A seeded generator, so a failure names a command line that fails again.
private struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
