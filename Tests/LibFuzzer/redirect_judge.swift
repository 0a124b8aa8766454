// libFuzzer target: the redirect judging of a pending sign-in (`LoginSession.judge(query:)`, the rule every
// loopback redirect meets after the listener's method/path/Host check, and `judge(pastedURL:redirectURI:)`, the rule for a
// pasted or scheme-handed URL), compiled with the AuthCore sources it needs (no NIO). The first input byte picks
// the entry point (even: a query, odd: a pasted URL); the rest is the text. Built and run by
// `scripts/fuzz --libfuzzer`; seeds in Tests/Fuzz/corpus/redirect_judge. The listener's HTTP pipeline (NIO) stays
// with the XCTest mutation fuzzer (Tests/FuzzTests).
//
// Properties (a violation aborts, so libFuzzer saves the input): a `code` or `denied` verdict needs the genuine
// state exactly once; `code` needs exactly one non-empty code and no error; an `iss` other than the issuer never
// passes; a pasted URL passes only when it is the redirect URI exactly (scheme case and port zeros aside).
import Foundation
#if canImport(Glibc)
import Glibc
#endif

let genuineState = "S7aTe-0123456789abcdefghijklmnopqrstuvwxyzAB"
let port = 43127
let path = "/oauth2/callback/work"
let issuer = URL(string: "https://issuer.example")!

let session: LoginSession = {
    let metadata = ProviderMetadata(issuer: issuer, authorizationEndpoint: URL(string: "https://issuer.example/authorize")!,
                                    tokenEndpoint: URL(string: "https://issuer.example/token")!)
    let account = AccountConfig(name: "work", issuer: issuer, clientID: "client", scopes: ["openid"])
    return LoginSession(account: account, metadata: metadata, state: genuineState, nonce: "nonce")
}()

/// The oracle's own reading of a query (independent of `LoginSession.parseQuery`): `+` is a space, `%XX` a byte,
/// and a pair whose escapes are invalid decodes to the empty string, as the judge's does.
func values(of name: String, in query: String) -> [String] {
    func decode(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "+") {
                bytes.append(0x20)
            } else if byte == UInt8(ascii: "%") {
                guard utf8.count >= 2, let value = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16) else { return nil }
                bytes.append(value)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }
    return query.split(separator: "&").compactMap { pair in
        let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        guard (decode(parts[0]) ?? "") == name else { return nil }
        return parts.count > 1 ? (decode(parts[1]) ?? "") : ""
    }
}

func checkQuery(_ query: String) {
    let verdict = session.judge(query: query)
    switch verdict {
    case .rejected:
        return
    case .code(let code):
        guard values(of: "error", in: query).isEmpty else { violated("a code verdict for a response with error=") }
        guard values(of: "code", in: query).count == 1, !code.reveal().isEmpty else { violated("a code verdict without exactly one code") }
    case .denied:
        break
    }
    guard values(of: "state", in: query) == [genuineState] else { violated("\(verdict) without the genuine state exactly once") }
    for iss in values(of: "iss", in: query) where iss != issuer.absoluteString {
        violated("\(verdict) with iss \(iss.debugDescription)")
    }
}

func checkPasted(_ text: String) {
    let verdict = session.judge(pastedURL: text, redirectURI: "http://127.0.0.1:\(port)\(path)")
    if case .rejected = verdict { return }
    let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
    let afterHost = trimmed.dropFirst(7).drop(while: { $0 != ":" }).dropFirst().drop(while: { $0 == "0" })
    guard trimmed.prefix(7).lowercased() == "http://", trimmed.dropFirst(7).hasPrefix("127.0.0.1:"),
          afterHost.hasPrefix("\(port)\(path)?")
    else { violated("accepted a pasted URL that is not the redirect URI: \(verdict)") }
    let query = String(trimmed.split(separator: "?", maxSplits: 1).last ?? "")
    guard values(of: "state", in: query) == [genuineState] else { violated("accepted a pasted URL without the genuine state") }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRedirectJudge(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data + 1, count: size - 1), as: UTF8.self)
    if data[0] % 2 == 0 { checkQuery(text) } else { checkPasted(text) }
    return 0
}
