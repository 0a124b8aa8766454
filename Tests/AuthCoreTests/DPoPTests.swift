import AuthTestSupport
@testable import AuthCore
import Crypto
import Foundation
import XCTest

/// DPoP (RFC 9449) on the agent's own requests: the key and its proofs, the key kept with the refresh token in one
/// secret, a proof on every token-endpoint call, nonces, `dpop_jkt`, and the `dpop` setting. Each proof here is
/// verified as a server would (signature with the key in its header, claims), so a proof that skips or fakes a step
/// fails. The same against a real server: Tests/e2e/test_dpop.py.
final class DPoPTests: XCTestCase {
    let key = SecretKey(Fixtures.account())

    /// A proof taken apart and checked as RFC 9449 §4.3 has a server do it: the signature with the header's key.
    struct Verified {
        var header: [String: Any]
        var claims: [String: Any]
        var thumbprint: String
    }

    func verify(_ proof: String, file: StaticString = #filePath, line: UInt = #line) throws -> Verified {
        let parts = proof.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        XCTAssertEqual(parts.count, 3, file: file, line: line)
        let header = try XCTUnwrap(JSONSerialization.jsonObject(with: XCTUnwrap(Base64URL.decode(parts[0]))) as? [String: Any])
        let claims = try XCTUnwrap(JSONSerialization.jsonObject(with: XCTUnwrap(Base64URL.decode(parts[1]))) as? [String: Any])
        let jwk = try XCTUnwrap(header["jwk"] as? [String: String])
        XCTAssertNil(jwk["d"], "the private key never leaves the agent", file: file, line: line)
        let input = Data("\(parts[0]).\(parts[1])".utf8), signature = try XCTUnwrap(Base64URL.decode(parts[2]))
        let x = try XCTUnwrap(Base64URL.decode(XCTUnwrap(jwk["x"])))
        let valid: Bool, canonical: String
        // The key type the header's alg calls for (RFC 7518 §3.4, RFC 8037 §3.1), and the RFC 7638 members of each
        // in lexicographic order, computed here from the header's JWK as a server would.
        switch (header["alg"] as? String, jwk["kty"], jwk["crv"]) {
        case ("ES256", "EC", "P-256"):
            let y = try XCTUnwrap(Base64URL.decode(XCTUnwrap(jwk["y"])))
            let publicKey = try P256.Signing.PublicKey(x963Representation: [0x04] + x + y)
            valid = publicKey.isValidSignature(try P256.Signing.ECDSASignature(rawRepresentation: signature), for: input)
            canonical = #"{"crv":"P-256","kty":"EC","x":"\#(jwk["x"]!)","y":"\#(jwk["y"]!)"}"#
        case ("EdDSA", "OKP", "Ed25519"):
            XCTAssertNil(jwk["y"], "an OKP key has no y (RFC 8037 §2)", file: file, line: line)
            valid = try Curve25519.Signing.PublicKey(rawRepresentation: x).isValidSignature(signature, for: input)
            canonical = #"{"crv":"Ed25519","kty":"OKP","x":"\#(jwk["x"]!)"}"#
        default:
            XCTFail("alg \(header["alg"] ?? "none") with a \(jwk["kty"] ?? "") \(jwk["crv"] ?? "") key", file: file, line: line)
            valid = false
            canonical = ""
        }
        XCTAssertTrue(valid, "the signature does not verify", file: file, line: line)
        return Verified(header: header, claims: claims,
                        thumbprint: Base64URL.encode(SHA256.hash(data: Data(canonical.utf8))))
    }

    func testAProofIsSignedByTheKeyItNamesAndCarriesTheRequestItIsFor() async throws {
        let key = DPoPKey()
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let url = URL(string: "https://api.example.com/v1/items?page=2#top")!
        let proof = try await key.proof(method: "GET", url: url, accessToken: Secret("at-1"), nonce: "n-1", issuedAt: now)
        let seen = try verify(proof.reveal())
        XCTAssertEqual(seen.header["typ"] as? String, "dpop+jwt")
        XCTAssertEqual(seen.header["alg"] as? String, "ES256")
        XCTAssertEqual(seen.thumbprint, key.thumbprint)
        XCTAssertEqual(seen.claims["htm"] as? String, "GET")
        XCTAssertEqual(seen.claims["htu"] as? String, "https://api.example.com/v1/items", "no query, no fragment (§4.2)")
        XCTAssertEqual(seen.claims["iat"] as? Int, 1_800_000_000)
        XCTAssertEqual(seen.claims["nonce"] as? String, "n-1")
        XCTAssertEqual(seen.claims["ath"] as? String, Base64URL.encode(SHA256.hash(data: Data("at-1".utf8))))
        let jti = try XCTUnwrap(seen.claims["jti"] as? String)
        XCTAssertGreaterThanOrEqual(jti.count, 16)
        let again = try verify(try await key.proof(method: "GET", url: url, issuedAt: now).reveal())
        XCTAssertNotEqual(again.claims["jti"] as? String, jti, "a fresh jti for every proof")
        XCTAssertNil(again.claims["ath"], "no access token, no ath")
        XCTAssertNil(again.claims["nonce"])
        XCTAssertNotEqual(DPoPKey().thumbprint, key.thumbprint, "a new key for each sign-in")
    }

    func testTheKeyIsKeptWithTheRefreshTokenInOneSecretAndAPlainTokenReadsAsBefore() throws {
        let proofKey = DPoPKey()
        let stored = StoredCredential.refreshToken(Secret("rt-1"), proofKey: proofKey).stored
        XCTAssertFalse(stored.reveal().hasPrefix("rt-1"))
        let read = try StoredCredential(stored: stored)
        XCTAssertEqual(read.refreshToken?.reveal(), "rt-1")
        XCTAssertEqual(read.proofKey, proofKey)
        XCTAssertEqual(read.proofKey?.thumbprint, proofKey.thumbprint)

        let plain = try StoredCredential(stored: Secret("rt-plain"))
        XCTAssertEqual(plain, .refreshToken(Secret("rt-plain")), "a sign-in without DPoP is stored as it always was")
        XCTAssertEqual(plain.stored.reveal(), "rt-plain")
        let access = try StoredCredential(stored: StoredCredential.longLivedAccessToken(Secret("gho_1")).stored)
        XCTAssertEqual(access.token, .longLivedAccessToken(Secret("gho_1")))

        for marker in ["\u{1}dpop_es256\u{1}", "\u{1}dpop_eddsa\u{1}"] {
            let broken = Secret(marker + "not-a-key\u{1}rt-1")
            XCTAssertThrowsError(try StoredCredential(stored: broken)) { error in
                XCTAssertEqual((error as? AuthError)?.code, .loginRequired)
                XCTAssertTrue("\(error)".contains("DPoP key cannot be read"))
            }
        }
    }

    // MARK: EdDSA (RFC 8037), for a server that offers it and not ES256

    /// RFC 8037 appendix A.1's Ed25519 key (`d`, the seed, and `x`) and appendix A.3's thumbprint of it; the same
    /// thumbprint computed by jwcrypto from `x`.
    static let rfc8037Seed = "nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"
    static let rfc8037X = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
    static let rfc8037Thumbprint = "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"

    func testAnEdDSAKeySignsProofsThatVerifyWithItsHeaderKeyAndHasRFC8037sThumbprint() async throws {
        let key = try XCTUnwrap(DPoPKey(stored: DPoPTests.rfc8037Seed, algorithm: .eddsa))
        XCTAssertEqual(key.algorithm, .eddsa)
        XCTAssertEqual(key.thumbprint, DPoPTests.rfc8037Thumbprint)
        let url = URL(string: "https://api.example.com/v1/items?page=2")!
        let proof = try await key.proof(method: "GET", url: url, accessToken: Secret("at-1"), nonce: "n-1",
                                        issuedAt: Date(timeIntervalSince1970: 1_800_000_000))
        let seen = try verify(proof.reveal())
        XCTAssertEqual(seen.header["typ"] as? String, "dpop+jwt")
        XCTAssertEqual(seen.header["alg"] as? String, "EdDSA")
        let jwk = try XCTUnwrap(seen.header["jwk"] as? [String: String])
        XCTAssertEqual(jwk, ["kty": "OKP", "crv": "Ed25519", "x": DPoPTests.rfc8037X], "the public key only")
        XCTAssertEqual(seen.thumbprint, DPoPTests.rfc8037Thumbprint)
        XCTAssertEqual(seen.claims["htu"] as? String, "https://api.example.com/v1/items")
        XCTAssertEqual(seen.claims["ath"] as? String, Base64URL.encode(SHA256.hash(data: Data("at-1".utf8))))
        XCTAssertEqual(seen.claims["nonce"] as? String, "n-1")

        let fresh = DPoPKey(.eddsa)
        let freshProof = try await fresh.proof(method: "POST", url: url, issuedAt: Date())
        XCTAssertEqual(try verify(freshProof.reveal()).thumbprint, fresh.thumbprint)
        XCTAssertNotEqual(DPoPKey(.eddsa).thumbprint, fresh.thumbprint, "a new key for each sign-in")
    }

    func testAnEdDSAKeySurvivesTheKeyringAndAnES256ItemOfTodaysFormatStillReads() async throws {
        let eddsa = DPoPKey(.eddsa)
        let stored = StoredCredential.refreshToken(Secret("rt-1"), proofKey: eddsa).stored
        XCTAssertTrue(stored.reveal().hasPrefix("\u{1}dpop_eddsa\u{1}"))
        let read = try StoredCredential(stored: stored)
        XCTAssertEqual(read.refreshToken?.reveal(), "rt-1")
        XCTAssertEqual(read.proofKey, eddsa)
        XCTAssertEqual(read.proofKey?.algorithm, .eddsa)
        XCTAssertEqual(read.proofKey?.thumbprint, eddsa.thumbprint)
        let access = try StoredCredential(stored: StoredCredential(.longLivedAccessToken(Secret("gho_1")), proofKey: eddsa).stored)
        XCTAssertEqual(access.token, .longLivedAccessToken(Secret("gho_1")))
        XCTAssertEqual(access.proofKey, eddsa)
        // RFC 8037's seed under the EdDSA marker: the key of appendix A.
        let rfc = try StoredCredential(stored: Secret("\u{1}dpop_eddsa\u{1}\(DPoPTests.rfc8037Seed)\u{1}rt-2"))
        XCTAssertEqual(rfc.proofKey?.thumbprint, DPoPTests.rfc8037Thumbprint)

        // An item as the agent has written it since DPoP came in, written out here rather than by the code under
        // test (a P-256 scalar made by Python's cryptography, its thumbprint by jwcrypto): it reads as that ES256
        // key and is written back byte for byte.
        let today = Secret("\u{1}dpop_es256\u{1}O0u0Ade4VoafX1m_LH1a2xZBs2pGMMD_XEjK6xx_Gaw\u{1}rt-old")
        let old = try StoredCredential(stored: today)
        XCTAssertEqual(old.refreshToken?.reveal(), "rt-old")
        XCTAssertEqual(old.proofKey?.algorithm, .es256)
        XCTAssertEqual(old.proofKey?.thumbprint, "Uuy3Jm9FpcPtN68fnR9YNgcoJ2tKe39iORwv35BLjdM")
        XCTAssertEqual(old.stored, today)
        let proof = try verify(try await XCTUnwrap(old.proofKey).proof(method: "POST", url: URL(string: "https://issuer.example/token")!,
                                                                        issuedAt: Date()).reveal())
        XCTAssertEqual(proof.header["alg"] as? String, "ES256")
        XCTAssertEqual(proof.thumbprint, "Uuy3Jm9FpcPtN68fnR9YNgcoJ2tKe39iORwv35BLjdM")

        // The same scalar under the other marker is a different key: the marker, not the bytes, says which.
        let swapped = try StoredCredential(stored: Secret("\u{1}dpop_eddsa\u{1}O0u0Ade4VoafX1m_LH1a2xZBs2pGMMD_XEjK6xx_Gaw\u{1}rt-old"))
        XCTAssertEqual(swapped.proofKey?.algorithm, .eddsa)
        XCTAssertNotEqual(swapped.proofKey, old.proofKey)
    }

    // MARK: The broker

    static let dpopDiscovery = Array("""
    {"issuer":"https://issuer.example","authorization_endpoint":"https://issuer.example/authorize",
     "token_endpoint":"https://issuer.example/token","revocation_endpoint":"https://issuer.example/revoke",
     "jwks_uri":"https://issuer.example/jwks","code_challenge_methods_supported":["S256"],
     "dpop_signing_alg_values_supported":["RS256","ES256"]}
    """.utf8)

    /// The discovery document of a server whose `dpop_signing_alg_values_supported` is `algorithms`.
    static func discovery(offering algorithms: [String]) -> [UInt8] {
        let text = String(decoding: dpopDiscovery, as: UTF8.self)
        let list = "[" + algorithms.map { "\"\($0)\"" }.joined(separator: ",") + "]"
        return Array(text.replacingOccurrences(of: #"["RS256","ES256"]"#, with: list).utf8)
    }

    func dpopBroker(_ store: MemorySecretStore, _ http: FakeHTTP, account: AccountConfig = Fixtures.account(),
                    offer: Bool = true, offering algorithms: [String]? = nil, redirects: FakeRedirects = FakeRedirects(),
                    browser: FakeBrowser = FakeBrowser()) -> TokenBroker {
        let broker = Fixtures.broker(accounts: [account], store: store, http: http, redirects: redirects, browser: browser)
        if offer {
            http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(
                status: 200, body: algorithms.map { DPoPTests.discovery(offering: $0) } ?? DPoPTests.dpopDiscovery)
        }
        return broker
    }

    /// A sign-in as before DPoP: no `dpop_jkt`, no proof, the plain refresh token stored.
    func assertSignsInWithoutDPoP(offer: Bool = true, offering algorithms: [String]? = nil,
                                  file: StaticString = #filePath, line: UInt = #line) async throws {
        let store = MemorySecretStore()
        let http = FakeHTTP(), redirects = FakeRedirects(), browser = FakeBrowser()
        let broker = dpopBroker(store, http, offer: offer, offering: algorithms, redirects: redirects, browser: browser)
        let query = try await signIn(broker, http, redirects, browser, reply: FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1"))
        XCTAssertNil(query["dpop_jkt"], file: file, line: line)
        XCTAssertNil(http.tokenHeaders.first?["DPoP"], file: file, line: line)
        let itemSecret = await store.items[key]
        let item = try StoredCredential(stored: XCTUnwrap(itemSecret, file: file, line: line))
        XCTAssertEqual(item.refreshToken?.reveal(), "rt-1", file: file, line: line)
        XCTAssertNil(item.proofKey, file: file, line: line)
    }

    static func dpopReply(access: String, refresh: String?, type: String = "DPoP", nonce: String? = nil) -> HTTPReply {
        var object: [String: Any] = ["access_token": access, "token_type": type, "expires_in": 3600]
        if let refresh { object["refresh_token"] = refresh }
        return HTTPReply(status: 200, body: Array(try! JSONSerialization.data(withJSONObject: object)), dpopNonce: nonce)
    }

    func signIn(_ broker: TokenBroker, _ http: FakeHTTP, _ redirects: FakeRedirects, _ browser: FakeBrowser,
                reply: HTTPReply) async throws -> [String: [String]] {
        let ticket = try await broker.beginLogin(account: "work")
        let query = browser.lastQuery
        var reply = reply
        if let nonce = query["nonce"]?.first {
            // The ID token the sign-in needs, in the scripted reply.
            var object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(reply.body)) as? [String: Any])
            object["id_token"] = await Fixtures.signedIDToken(nonce: nonce)
            reply = HTTPReply(status: reply.status, body: Array(try JSONSerialization.data(withJSONObject: object)),
                              dpopNonce: reply.dpopNonce)
        }
        http.tokenReplies = [reply]
        XCTAssertEqual(redirects.deliver("code=the-code&state=\(try XCTUnwrap(query["state"]?.first))"), .success)
        _ = try await broker.awaitLogin(ticket)
        return query
    }

    func testASignInMakesAKeyBindsTheCodeAndStoresTheKeyWithTheRefreshToken() async throws {
        let store = MemorySecretStore()
        let http = FakeHTTP(), redirects = FakeRedirects(), browser = FakeBrowser()
        let broker = dpopBroker(store, http, redirects: redirects, browser: browser)
        let query = try await signIn(broker, http, redirects, browser, reply: DPoPTests.dpopReply(access: "at-1", refresh: "rt-1"))

        let proof = try verify(XCTUnwrap(http.tokenHeaders.first?["DPoP"]))
        XCTAssertEqual(query["dpop_jkt"]?.first, proof.thumbprint, "the code is bound to the key that redeems it (§10)")
        XCTAssertEqual(proof.claims["htm"] as? String, "POST")
        XCTAssertEqual(proof.claims["htu"] as? String, "https://issuer.example/token")
        XCTAssertNil(proof.claims["ath"], "no access token at the token endpoint")
        let item = await store.items[key]
        let stored = try StoredCredential(stored: XCTUnwrap(item))
        XCTAssertEqual(stored.refreshToken?.reveal(), "rt-1")
        XCTAssertEqual(stored.proofKey?.thumbprint, proof.thumbprint, "the key and the refresh token, in one item")
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.tokenType, "DPoP")

        // A refresh after a restart: the key comes back from the keyring with the token.
        let restarted = dpopBroker(store, http)
        http.tokenReplies = [DPoPTests.dpopReply(access: "at-2", refresh: "rt-2")]
        _ = try await restarted.accessToken(account: "work")
        let refresh = try verify(XCTUnwrap(http.tokenHeaders.last?["DPoP"]))
        XCTAssertEqual(refresh.thumbprint, proof.thumbprint)
        XCTAssertNotEqual(refresh.claims["jti"] as? String, proof.claims["jti"] as? String)
        let rotatedItem = await store.items[key]
        let rotated = try StoredCredential(stored: XCTUnwrap(rotatedItem))
        XCTAssertEqual(rotated.refreshToken?.reveal(), "rt-2")
        XCTAssertEqual(rotated.proofKey?.thumbprint, proof.thumbprint, "a rotated token keeps its key")
    }

    func testANonceAskedForIsRetriedOnceAndANonceOnAnyAnswerIsUsedNextTime() async throws {
        let proofKey = DPoPKey()
        let store = MemorySecretStore(items: [key: StoredCredential.refreshToken(Secret("rt-1"), proofKey: proofKey).stored])
        let http = FakeHTTP()
        let broker = dpopBroker(store, http)
        var askForNonce = FakeHTTP.errorReply(401, "use_dpop_nonce")
        askForNonce.dpopNonce = "n-1"
        http.tokenReplies = [askForNonce, DPoPTests.dpopReply(access: "at-1", refresh: "rt-2", nonce: "n-2")]
        let first = try await broker.accessToken(account: "work")
        XCTAssertEqual(first.accessToken.reveal(), "at-1")
        let proofs = try http.tokenHeaders.map { try verify(XCTUnwrap($0["DPoP"])) }
        XCTAssertEqual(proofs.count, 2)
        XCTAssertNil(proofs[0].claims["nonce"])
        XCTAssertEqual(proofs[1].claims["nonce"] as? String, "n-1", "retried with the nonce the error carried")
        XCTAssertNotEqual(proofs[1].claims["jti"] as? String, proofs[0].claims["jti"] as? String,
                          "the retry is a new proof, not the refused one again (§7.3)")

        http.tokenReplies = [DPoPTests.dpopReply(access: "at-2", refresh: "rt-3")]
        _ = try await broker.accessToken(account: "work", forceRefresh: true)
        XCTAssertEqual(try verify(XCTUnwrap(http.tokenHeaders.last?["DPoP"])).claims["nonce"] as? String, "n-2",
                       "the nonce of a 200 is kept for the next request")

        var again = FakeHTTP.errorReply(400, "use_dpop_nonce")
        again.dpopNonce = "n-3"
        var still = FakeHTTP.errorReply(400, "use_dpop_nonce")
        still.dpopNonce = "n-4"
        http.tokenReplies = [again, still]
        await assertThrows(.serverError) { _ = try await broker.accessToken(account: "work", forceRefresh: true) }
        XCTAssertEqual(http.tokenPosts.count, 5, "one retry, not a loop")
    }

    func testANonceIsKeptForTheServerThatGaveItAndSentToNoOther() async throws {
        var other = Fixtures.account("home")
        other.issuer = URL(string: "https://other.example")!
        let store = MemorySecretStore(items: [
            key: StoredCredential.refreshToken(Secret("rt-w"), proofKey: DPoPKey()).stored,
            SecretKey(other): StoredCredential.refreshToken(Secret("rt-h"), proofKey: DPoPKey()).stored,
        ])
        let http = FakeHTTP()
        let broker = Fixtures.broker(accounts: [Fixtures.account(), other], store: store, http: http)
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(status: 200, body: DPoPTests.dpopDiscovery)
        http.discovery["https://other.example/.well-known/openid-configuration"] = HTTPReply(
            status: 200, body: Array(String(decoding: DPoPTests.dpopDiscovery, as: UTF8.self)
                .replacingOccurrences(of: "issuer.example", with: "other.example").utf8))
        http.tokenReplies = [DPoPTests.dpopReply(access: "at-w", refresh: "rt-w2", nonce: "n-work"),
                             DPoPTests.dpopReply(access: "at-h", refresh: "rt-h2")]
        _ = try await broker.accessToken(account: "work")
        _ = try await broker.accessToken(account: "home")
        let home = try verify(XCTUnwrap(http.tokenHeaders.last?["DPoP"]))
        XCTAssertEqual(home.claims["htu"] as? String, "https://other.example/token")
        XCTAssertNil(home.claims["nonce"], "one server's nonce is never sent to another (§8, §9)")

        http.tokenReplies = [DPoPTests.dpopReply(access: "at-w3", refresh: "rt-w3")]
        _ = try await broker.accessToken(account: "work", forceRefresh: true)
        XCTAssertEqual(try verify(XCTUnwrap(http.tokenHeaders.last?["DPoP"])).claims["nonce"] as? String, "n-work",
                       "the server that gave the nonce gets it back")
    }

    func testEveryDevicePollCarriesAProofOfTheSignInsKeyAndTheLastNonce() async throws {
        let store = MemorySecretStore()
        let http = FakeHTTP()
        let broker = dpopBroker(store, http, account: DeviceLoginTests.deviceAccount())
        var pending = FakeHTTP.errorReply(400, "authorization_pending")
        pending.dpopNonce = "n-1"
        http.tokenReplies = [DeviceLoginTests.authorization(), pending, FakeHTTP.errorReply(400, "authorization_pending"),
                             DPoPTests.dpopReply(access: "at-1", refresh: "rt-1")]
        let ticket = try await broker.beginLogin(account: "work", method: .device)
        _ = try await broker.awaitLogin(ticket)

        let polls = http.tokenHeaders
        XCTAssertEqual(polls.count, 3)
        let proofs = try polls.map { try verify(XCTUnwrap($0["DPoP"], "a poll without a proof (§5: every grant type)")) }
        XCTAssertEqual(Set(proofs.map(\.thumbprint)).count, 1, "one key for the whole sign-in")
        XCTAssertEqual(Set(proofs.compactMap { $0.claims["jti"] as? String }).count, 3, "a fresh jti for every poll")
        for proof in proofs {
            XCTAssertEqual(proof.claims["htm"] as? String, "POST")
            XCTAssertEqual(proof.claims["htu"] as? String, "https://issuer.example/token")
        }
        XCTAssertNil(proofs[0].claims["nonce"])
        XCTAssertEqual(proofs[1].claims["nonce"] as? String, "n-1", "the nonce an authorization_pending answer carried")
        XCTAssertEqual(proofs[2].claims["nonce"] as? String, "n-1", "kept until the server gives another (§8.2)")
        let item = await store.items[key]
        let stored = try StoredCredential(stored: XCTUnwrap(item))
        XCTAssertEqual(stored.refreshToken?.reveal(), "rt-1")
        XCTAssertEqual(stored.proofKey?.thumbprint, proofs[0].thumbprint, "the polls' key is stored with the token")
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.tokenType, "DPoP")
    }

    func testARefusedProofIsReadWhateverTheStatusAndKeepsTheRefreshToken() async throws {
        let stored = StoredCredential.refreshToken(Secret("rt-1"), proofKey: DPoPKey()).stored
        for status in [400, 401, 403, 500] {
            let store = MemorySecretStore(items: [key: stored])
            let http = FakeHTTP()
            let broker = dpopBroker(store, http)
            http.tokenReplies = [FakeHTTP.errorReply(status, "invalid_dpop_proof")]
            await assertThrows(.dpopRefused) { _ = try await broker.accessToken(account: "work") }
            let kept = await store.items[key]
            XCTAssertEqual(kept, stored, "HTTP \(status)")
        }
    }

    /// `use_dpop_nonce` without a nonce to use: no retry (it would send the same proof again), and the error says
    /// what the server left out; the refresh token stays.
    func testANonceAskedForWithoutOneIsNotRetriedAndSaysSo() async throws {
        let stored = StoredCredential.refreshToken(Secret("rt-1"), proofKey: DPoPKey()).stored
        let store = MemorySecretStore(items: [key: stored])
        let http = FakeHTTP()
        let broker = dpopBroker(store, http)
        http.tokenReplies = [FakeHTTP.errorReply(400, "use_dpop_nonce"), FakeHTTP.tokenReply(access: "at-2")]
        do {
            _ = try await broker.accessToken(account: "work")
            XCTFail("a nonce asked for without one was answered")
        } catch {
            XCTAssertEqual(error.code, .serverError)
            XCTAssertTrue(error.message.contains("sent none"), error.message)
        }
        XCTAssertEqual(http.tokenHeaders.count, 1, "no retry without a nonce")
        let kept = await store.items[key]
        XCTAssertEqual(kept, stored)
    }

    /// An empty `DPoP-Nonce` header names no nonce: it is neither kept nor a reason to retry.
    func testAnEmptyNonceHeaderIsNoNonce() {
        let reply = HTTPReply(status: 400, body: Array(#"{"error":"use_dpop_nonce"}"#.utf8), dpopNonce: "")
        XCTAssertNil(reply.offeredDPoPNonce)
        XCTAssertEqual(HTTPReply(status: 200, body: [], dpopNonce: "n-1").offeredDPoPNonce, "n-1")
        XCTAssertTrue(TokenResponseParser.error(from: reply).message.contains("sent none"))
    }

    func testTheSettingDecidesAndAServerThatDoesNotOfferItGetsNoProof() async throws {
        // auto against a server that does not offer DPoP: a sign-in as before, no key, no proof, no dpop_jkt.
        try await assertSignsInWithoutDPoP(offer: false)
        // dpop = false against a server that offers it: none either.
        do {
            var account = Fixtures.account()
            account.dpop = .off
            let store = MemorySecretStore()
            let http = FakeHTTP(), redirects = FakeRedirects(), browser = FakeBrowser()
            let broker = dpopBroker(store, http, account: account, redirects: redirects, browser: browser)
            let query = try await signIn(broker, http, redirects, browser, reply: FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1"))
            XCTAssertNil(query["dpop_jkt"])
            XCTAssertNil(http.tokenHeaders.first?["DPoP"])
        }
        // dpop = true against a server that does not offer it: a clear error before any browser opens.
        do {
            var account = Fixtures.account()
            account.dpop = .required
            let http = FakeHTTP(), browser = FakeBrowser()
            let broker = dpopBroker(MemorySecretStore(), http, account: account, offer: false, browser: browser)
            await assertThrows(.dpopRefused) {
                let ticket = try await broker.beginLogin(account: "work")
                _ = try await broker.awaitLogin(ticket)
            }
            XCTAssertTrue(browser.opened.isEmpty)
        }
        // A DPoP token type to a request without a proof is refused (§5).
        do {
            let store = MemorySecretStore(items: [key: Secret("rt-1")])
            let http = FakeHTTP()
            let broker = dpopBroker(store, http, offer: false)
            http.tokenReplies = [DPoPTests.dpopReply(access: "at-1", refresh: "rt-2")]
            await assertThrows(.invalidTokenResponse) { _ = try await broker.accessToken(account: "work") }
        }
    }

    func testAServerOfferingOnlyEdDSAGetsEdDSAProofsAndTheKeyComesBackAfterARestart() async throws {
        for setting in [AccountConfig.Choice.auto, .required] {
            var account = Fixtures.account()
            account.dpop = setting
            let store = MemorySecretStore()
            let http = FakeHTTP(), redirects = FakeRedirects(), browser = FakeBrowser()
            let broker = dpopBroker(store, http, account: account, offering: ["RS256", "EdDSA"], redirects: redirects,
                                    browser: browser)
            let query = try await signIn(broker, http, redirects, browser, reply: DPoPTests.dpopReply(access: "at-1", refresh: "rt-1"))
            let proof = try verify(XCTUnwrap(http.tokenHeaders.first?["DPoP"]))
            XCTAssertEqual(proof.header["alg"] as? String, "EdDSA", "\(setting)")
            XCTAssertEqual(query["dpop_jkt"]?.first, proof.thumbprint, "\(setting)")
            let item = await store.items[key]
            let stored = try StoredCredential(stored: XCTUnwrap(item))
            XCTAssertEqual(stored.proofKey?.algorithm, .eddsa)
            XCTAssertEqual(stored.proofKey?.thumbprint, proof.thumbprint)

            let restarted = dpopBroker(store, http, account: account, offering: ["RS256", "EdDSA"])
            http.tokenReplies = [DPoPTests.dpopReply(access: "at-2", refresh: "rt-2")]
            _ = try await restarted.accessToken(account: "work")
            let refresh = try verify(XCTUnwrap(http.tokenHeaders.last?["DPoP"]))
            XCTAssertEqual(refresh.header["alg"] as? String, "EdDSA")
            XCTAssertEqual(refresh.thumbprint, proof.thumbprint, "the refresh is signed with the sign-in's key")
            let rotated = await store.items[key]
            XCTAssertEqual(try StoredCredential(stored: XCTUnwrap(rotated)).proofKey, stored.proofKey,
                           "the rotated token keeps its key")
        }
    }

    func testES256IsUsedWheneverTheServerOffersItAndNeitherAlgorithmMeansAsBefore() async throws {
        XCTAssertEqual(DPoPKey.Algorithm.preferred(offered: ["EdDSA", "ES256"]), .es256, "ES256 first, whatever the server's order")
        XCTAssertEqual(DPoPKey.Algorithm.preferred(offered: ["ES256"]), .es256)
        XCTAssertEqual(DPoPKey.Algorithm.preferred(offered: ["PS256", "EdDSA"]), .eddsa)
        XCTAssertNil(DPoPKey.Algorithm.preferred(offered: ["RS256", "PS256", "ES384", "Ed25519"]))
        XCTAssertNil(DPoPKey.Algorithm.preferred(offered: []))

        // ES256 and EdDSA, EdDSA listed first: an ES256 sign-in.
        do {
            let http = FakeHTTP(), redirects = FakeRedirects(), browser = FakeBrowser()
            let broker = dpopBroker(MemorySecretStore(), http, offering: ["EdDSA", "ES256"], redirects: redirects, browser: browser)
            _ = try await signIn(broker, http, redirects, browser, reply: DPoPTests.dpopReply(access: "at-1", refresh: "rt-1"))
            let proof = try verify(XCTUnwrap(http.tokenHeaders.first?["DPoP"]))
            XCTAssertEqual(proof.header["alg"] as? String, "ES256")
        }
        // DPoP offered with neither: auto signs in without it, as before.
        try await assertSignsInWithoutDPoP(offering: ["RS256", "PS256"])
        // ... and dpop = true is refused before any browser opens, naming what the server offers.
        do {
            var account = Fixtures.account()
            account.dpop = .required
            let http = FakeHTTP(), browser = FakeBrowser()
            let broker = dpopBroker(MemorySecretStore(), http, account: account, offering: ["RS256", "PS256"], browser: browser)
            do {
                let ticket = try await broker.beginLogin(account: "work")
                _ = try await broker.awaitLogin(ticket)
                XCTFail("dpop = true signed in against a server offering neither ES256 nor EdDSA")
            } catch {
                XCTAssertEqual((error as? AuthError)?.code, .dpopRefused)
                XCTAssertTrue("\(error)".contains("RS256, PS256"), "\(error)")
            }
            XCTAssertTrue(browser.opened.isEmpty)
        }
    }

    func testAProgramGetsAProofMadeWithTheKeyItsTokenIsBoundTo() async throws {
        let proofKey = DPoPKey()
        let store = MemorySecretStore(items: [key: StoredCredential.refreshToken(Secret("rt-1"), proofKey: proofKey).stored])
        let http = FakeHTTP()
        let broker = dpopBroker(store, http)
        http.tokenReplies = [DPoPTests.dpopReply(access: "at-1", refresh: "rt-2")]
        let target = try ProofTarget(method: "POST", url: "https://api.example.com/v1/x?y=1", nonce: "rs-nonce")
        let grant = try await broker.accessToken(account: "work", proof: target)
        let seen = try verify(XCTUnwrap(grant.dpopProof?.reveal()))
        XCTAssertEqual(seen.thumbprint, proofKey.thumbprint)
        XCTAssertEqual(seen.claims["htm"] as? String, "POST")
        XCTAssertEqual(seen.claims["htu"] as? String, "https://api.example.com/v1/x")
        XCTAssertEqual(seen.claims["nonce"] as? String, "rs-nonce")
        XCTAssertEqual(seen.claims["ath"] as? String, Base64URL.encode(SHA256.hash(data: Data("at-1".utf8))),
                       "the proof names the token it goes with")
        // Served from the cache: a new proof each time (fresh jti), for the same token.
        let again = try await broker.accessToken(account: "work", proof: target)
        XCTAssertEqual(again.accessToken, grant.accessToken)
        XCTAssertNotEqual(try verify(XCTUnwrap(again.dpopProof?.reveal())).claims["jti"] as? String, seen.claims["jti"] as? String)
        XCTAssertEqual(http.tokenPosts.count, 1)

        // A Bearer token gets no proof: there is nothing to bind it to.
        let plain = MemorySecretStore(items: [key: Secret("rt-1")])
        let bearerHTTP = FakeHTTP()
        let bearer = dpopBroker(plain, bearerHTTP, offer: false)
        bearerHTTP.tokenReplies = [FakeHTTP.tokenReply(access: "at-b", refresh: nil)]
        let bearerGrant = try await bearer.accessToken(account: "work", proof: target)
        XCTAssertNil(bearerGrant.dpopProof)
        XCTAssertEqual(bearerGrant.tokenType, "Bearer")
    }

    func testWhatAProgramAsksAProofForIsChecked() {
        XCTAssertNoThrow(try ProofTarget(method: "PATCH", url: "http://127.0.0.1:8080/x", nonce: nil))
        for (method, url, nonce) in [("GE T", "https://x.example/", nil), ("", "https://x.example/", nil),
                                     ("GET", "ftp://x.example/", nil), ("GET", "/relative", nil),
                                     ("GET", "https://x.example/", "a\"b"), ("GET", "https://x.example/", ""),
                                     ("GET", "https://x.example/", "line\nbreak")] as [(String, String, String?)] {
            XCTAssertThrowsError(try ProofTarget(method: method, url: url, nonce: nonce), "\(method) \(url) \(nonce ?? "-")") {
                XCTAssertEqual(($0 as? AuthError)?.code, .invalidTarget)
            }
        }
    }

    func testAutoSignsInWithoutDPoPWhenTheServerRefusesItForThisClientAndSaysSo() async throws {
        let store = MemorySecretStore()
        let http = FakeHTTP(), redirects = FakeRedirects(), browser = FakeBrowser()
        let broker = dpopBroker(store, http, redirects: redirects, browser: browser)
        let ticket = try await broker.beginLogin(account: "work")
        let query = browser.lastQuery
        XCTAssertNotNil(query["dpop_jkt"])
        let idToken = await Fixtures.signedIDToken(nonce: try XCTUnwrap(query["nonce"]?.first))
        http.tokenReplies = [FakeHTTP.errorReply(400, "invalid_dpop_proof"),
                             FakeHTTP.tokenReply(access: "at-1", refresh: "rt-1", idToken: idToken)]
        XCTAssertEqual(redirects.deliver("code=the-code&state=\(try XCTUnwrap(query["state"]?.first))"), .success)
        _ = try await broker.awaitLogin(ticket)
        XCTAssertNotNil(http.tokenHeaders.first?["DPoP"])
        XCTAssertNil(http.tokenHeaders.last?["DPoP"], "the second exchange goes without a proof")
        let itemSecret = await store.items[key]
        let item = try StoredCredential(stored: XCTUnwrap(itemSecret))
        XCTAssertEqual(item.refreshToken?.reveal(), "rt-1")
        XCTAssertNil(item.proofKey, "no key is stored for a sign-in without DPoP")
        let status = await broker.status()
        XCTAssertEqual(status.accounts.first?.dpop, "refused")
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.tokenType, "Bearer")

        // The server had bound the code to the key (dpop_jkt), so the exchange without a proof fails too: the
        // sign-in says to sign in again, and the next one asks without dpop_jkt and works.
        do {
            let http = FakeHTTP(), redirects = FakeRedirects(), browser = FakeBrowser()
            let broker = dpopBroker(MemorySecretStore(), http, redirects: redirects, browser: browser)
            let ticket = try await broker.beginLogin(account: "work")
            http.tokenReplies = [FakeHTTP.errorReply(400, "invalid_dpop_proof"), FakeHTTP.errorReply(400, "invalid_grant")]
            XCTAssertEqual(redirects.deliver("code=c&state=\(try XCTUnwrap(browser.lastQuery["state"]?.first))"), .success)
            do {
                _ = try await broker.awaitLogin(ticket)
                XCTFail("a code bound to the refused key was accepted")
            } catch {
                XCTAssertEqual(error.code, .loginFailed)
                XCTAssertTrue(error.message.contains("the next sign-in goes without it"), error.message)
            }
            let query = try await signIn(broker, http, redirects, browser, reply: FakeHTTP.tokenReply(access: "at-2", refresh: "rt-2"))
            XCTAssertNil(query["dpop_jkt"], "the next sign-in asks without DPoP")
            XCTAssertNil(http.tokenHeaders.last?["DPoP"])
        }

        // dpop = true: the same refusal fails the sign-in instead.
        var account = Fixtures.account()
        account.dpop = .required
        let strictHTTP = FakeHTTP(), strictRedirects = FakeRedirects(), strictBrowser = FakeBrowser()
        let strict = dpopBroker(MemorySecretStore(), strictHTTP, account: account, redirects: strictRedirects,
                                browser: strictBrowser)
        let strictTicket = try await strict.beginLogin(account: "work")
        strictHTTP.tokenReplies = [FakeHTTP.errorReply(401, "invalid_dpop_proof")]
        XCTAssertEqual(strictRedirects.deliver("code=c&state=\(try XCTUnwrap(strictBrowser.lastQuery["state"]?.first))"), .success)
        await assertThrows(.dpopRefused) { _ = try await strict.awaitLogin(strictTicket) }
        XCTAssertEqual(strictHTTP.tokenPosts.count, 1)
    }

    func testBearerAfterAProofMeansOnlyTheRefreshTokenIsBound() async throws {
        let proofKey = DPoPKey()
        let store = MemorySecretStore(items: [key: StoredCredential.refreshToken(Secret("rt-1"), proofKey: proofKey).stored])
        let http = FakeHTTP()
        let broker = dpopBroker(store, http)
        http.tokenReplies = [DPoPTests.dpopReply(access: "at-1", refresh: nil, type: "Bearer")]
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.tokenType, "Bearer", "Google's way: the refresh token is bound, the access token is not")
        XCTAssertNotNil(http.tokenHeaders.first?["DPoP"], "the refresh still carries a proof")
        let keptItem = await store.items[key]
        let kept = try StoredCredential(stored: XCTUnwrap(keptItem))
        XCTAssertEqual(kept.proofKey, proofKey)
        let status = await broker.status()
        XCTAssertEqual(status.accounts.first?.dpop, "refresh_token")
    }
}
