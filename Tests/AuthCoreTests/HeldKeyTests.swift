import AuthTestSupport
@testable import AuthCore
import Crypto
import Foundation
import Logging
import Synchronization
import XCTest

/// A stand-in for the TPM (``KeyHolder``): keys it made live only in it, and a blob it did not make is refused as
/// another TPM's. The real TPM (swtpm) is Tests/e2e/test_tpm.py's.
final class FakeKeyHolder: KeyHolder, @unchecked Sendable {
    private let keys = Mutex<[Data: P256.Signing.PrivateKey]>([:])
    /// While true, every call fails as a TPM that does not answer.
    let down = Mutex(false)
    let signatures = Mutex(0)

    func createKey() async throws(AuthError) -> HeldKey {
        if down.withLock({ $0 }) { throw AuthError(.tpmUnavailable, "no TPM answers (fake)") }
        let key = P256.Signing.PrivateKey()
        let blob = Data((0..<32).map { _ in UInt8.random(in: 0...255) })
        keys.withLock { $0[blob] = key }
        let point = Array(key.publicKey.x963Representation)
        return HeldKey(x: Data(point[1...32]), y: Data(point[33...64]), blob: blob)!
    }

    func sign(digest: Data, with key: HeldKey) async throws(AuthError) -> Data {
        if down.withLock({ $0 }) { throw AuthError(.tpmUnavailable, "no TPM answers (fake)") }
        guard let privateKey = keys.withLock({ $0[key.blob] }) else {
            throw AuthError(.loginRequired, "the account's DPoP key belongs to another TPM (fake)")
        }
        signatures.withLock { $0 += 1 }
        let signature = try! privateKey.signature(for: DigestOnly(bytes: digest)).rawRepresentation
        return signature
    }

    func check() async -> KeyHolderCheck {
        KeyHolderCheck(place: "fake", problem: down.withLock { $0 } ? AuthError(.tpmUnavailable, "down") : nil)
    }

    /// A digest handed over as one: the TPM signs the digest the agent computed.
    struct DigestOnly: Digest {
        static let byteCount = 32
        let bytes: Data
        func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try bytes.withUnsafeBytes(body) }
        var description: String { "digest" }
        func hash(into hasher: inout Hasher) { hasher.combine(bytes) }
        static func == (a: DigestOnly, b: DigestOnly) -> Bool { a.bytes == b.bytes }
        func makeIterator() -> Array<UInt8>.Iterator { Array(bytes).makeIterator() }
    }
}

final class HeldKeyTests: XCTestCase {
    /// DPoPTests' proof check: the signature with the header's key, as a server does.
    let verifier = DPoPTests(name: "verify", testClosure: { _ in })
    // MARK: Pure parts

    func testSignaturesArePaddedToThirtyTwoBytesEachWhateverTheTPMReturned() {
        let r = Data(repeating: 0xAB, count: 32), s = Data(repeating: 0xCD, count: 32)
        XCTAssertEqual(HeldKey.jwsSignature(r: r, s: s), r + s)
        // A stack that strips leading zeros: 31 bytes (or fewer) are left-padded.
        let short = Data(repeating: 0x11, count: 31)
        XCTAssertEqual(HeldKey.jwsSignature(r: short, s: s), Data([0]) + short + s)
        XCTAssertEqual(HeldKey.jwsSignature(r: Data([7]), s: s), Data(repeating: 0, count: 31) + Data([7]) + s)
        // One that keeps a sign byte (DER-style 0x00 before a high bit): dropped.
        XCTAssertEqual(HeldKey.jwsSignature(r: Data([0]) + Data(repeating: 0x80, count: 32), s: s),
                       Data(repeating: 0x80, count: 32) + s)
        // More than 32 significant bytes, or nothing, is no P-256 signature.
        XCTAssertNil(HeldKey.jwsSignature(r: Data(repeating: 1, count: 33), s: s))
        XCTAssertNil(HeldKey.jwsSignature(r: Data(), s: s))
        XCTAssertEqual(HeldKey.jwsSignature(r: r, s: s)?.count, 64)
    }

    func testAHeldKeyIsStoredAsItsPublicPointAndBlobAndReadsBack() throws {
        let key = try XCTUnwrap(HeldKey(x: Data(repeating: 1, count: 31), y: Data(repeating: 2, count: 32),
                                        blob: Data([0, 0x5a, 1, 2, 3])))
        XCTAssertEqual(key.x, Data([0]) + Data(repeating: 1, count: 31), "a short coordinate is padded")
        XCTAssertEqual(HeldKey(stored: key.stored), key)
        XCTAssertFalse(key.stored.contains("\u{1}"), "nothing that could end the keyring item's section")
        for bad in ["", ".", "AAAA", "\(Base64URL.encode(Data(repeating: 1, count: 63))).AAEC",
                    "\(Base64URL.encode(Data(repeating: 1, count: 64)))." , "a.b.c", "!!.AAEC"] {
            XCTAssertNil(HeldKey(stored: bad), bad)
        }
        XCTAssertNil(HeldKey(x: Data(repeating: 1, count: 33), y: Data(repeating: 2, count: 32), blob: Data([1])))
        XCTAssertNil(HeldKey(x: Data(repeating: 1, count: 32), y: Data(repeating: 2, count: 32), blob: Data()))
    }

    func testTheKeyringItemOfATPMKeyHoldsNoPrivateKeyAndProofsAreTheTPMsSignatures() async throws {
        let holder = FakeKeyHolder()
        let key = DPoPKey(held: try await holder.createKey())
        XCTAssertEqual(key.algorithm, .es256)
        let credential = StoredCredential.refreshToken(Secret("rt-1"), proofKey: key)
        let stored = credential.stored.reveal()
        XCTAssertTrue(stored.hasPrefix("\u{1}dpop_tpm_es256\u{1}"))
        XCTAssertFalse(stored.hasPrefix("\u{1}dpop_es256\u{1}"), "never read as a software key")
        let read = try StoredCredential(stored: credential.stored)
        XCTAssertEqual(read, credential)
        XCTAssertEqual(read.proofKey?.held, key.held)
        XCTAssertEqual(read.proofKey?.thumbprint, key.thumbprint)
        // The section is the public point and the blob, nothing else.
        let section = stored.dropFirst("\u{1}dpop_tpm_es256\u{1}".count).prefix { $0 != "\u{1}" }
        XCTAssertEqual(String(section), key.held?.stored)

        let proof = try await key.proof(method: "POST", url: URL(string: "https://issuer.example/token")!,
                                        issuedAt: Date(), holder: holder)
        let seen = try verifier.verify(proof.reveal())
        XCTAssertEqual(seen.thumbprint, key.thumbprint)
        XCTAssertEqual(holder.signatures.withLock { $0 }, 1)

        await assertThrows(.tpmUnavailable) {
            _ = try await key.proof(method: "POST", url: URL(string: "https://issuer.example/token")!, issuedAt: Date())
        }
        await assertThrows(.loginRequired) {
            _ = try await key.proof(method: "POST", url: URL(string: "https://issuer.example/token")!, issuedAt: Date(),
                                    holder: FakeKeyHolder())
        }
        XCTAssertThrowsError(try StoredCredential(stored: Secret("\u{1}dpop_tpm_es256\u{1}garbage\u{1}rt-1")))
    }

    // MARK: The broker

    let secretKey = SecretKey(Fixtures.account())

    func broker(_ store: MemorySecretStore, _ http: FakeHTTP, holder: (any KeyHolder)?,
                place: AccountConfig.KeyPlace = .tpm) -> TokenBroker {
        var account = Fixtures.account()
        account.dpopKey = place
        http.discovery["https://issuer.example/.well-known/openid-configuration"] = HTTPReply(status: 200, body: DPoPTests.dpopDiscovery)
        if http.discovery[Fixtures.jwksURI] == nil { http.discovery[Fixtures.jwksURI] = HTTPReply(status: 200, body: TestKeys.defaultJWKS) }
        return TokenBroker(accounts: [account], store: store, http: http, redirects: FakeRedirects(), browser: FakeBrowser(),
                           time: ManualClock(), keyHolder: holder, logger: Logger(label: "test"))
    }

    func testWhereTheKeyIsMadeIsTheSettingsAndTPMNeverFallsBackToSoftware() async throws {
        let holder = FakeKeyHolder()
        let tpm = broker(MemorySecretStore(), FakeHTTP(), holder: holder)
        var config = Fixtures.account()
        config.dpopKey = .tpm
        let made = try await tpm.newKey(.es256, config)
        XCTAssertNotNil(made.held)
        await assertThrows(.dpopRefused) { _ = try await tpm.newKey(.eddsa, config) }
        holder.down.withLock { $0 = true }
        await assertThrows(.tpmUnavailable) { _ = try await tpm.newKey(.es256, config) }
        let none = broker(MemorySecretStore(), FakeHTTP(), holder: nil)
        await assertThrows(.tpmUnavailable) { _ = try await none.newKey(.es256, config) }

        config.dpopKey = .auto
        let fallback = try await tpm.newKey(.es256, config)
        XCTAssertNil(fallback.held, "auto: a software key when no TPM answers")
        holder.down.withLock { $0 = false }
        let held = try await tpm.newKey(.es256, config)
        XCTAssertNotNil(held.held, "auto: the TPM when one answers")
        let eddsa = try await tpm.newKey(.eddsa, config)
        XCTAssertEqual(eddsa.algorithm, .eddsa, "auto: EdDSA stays in software")

        config.dpopKey = .software
        let software = try await tpm.newKey(.es256, config)
        XCTAssertNil(software.held)
    }

    func testARefreshSignsWithTheTPMAndATPMThatIsGoneOrAnotherKeepsTheRefreshToken() async throws {
        let holder = FakeKeyHolder()
        let key = DPoPKey(held: try await holder.createKey())
        let stored = StoredCredential.refreshToken(Secret("rt-1"), proofKey: key).stored
        let store = MemorySecretStore(items: [secretKey: stored])
        let http = FakeHTTP()
        let broker = broker(store, http, holder: holder)
        http.tokenReplies = [DPoPTests.dpopReply(access: "at-1", refresh: "rt-2")]
        let token = try await broker.accessToken(account: "work")
        XCTAssertEqual(token.tokenType, "DPoP")
        let proof = try verifier.verify(XCTUnwrap(http.tokenHeaders.last?["DPoP"]))
        XCTAssertEqual(proof.thumbprint, key.thumbprint)
        let rotatedItem = await store.items[secretKey]
        let rotated = try StoredCredential(stored: XCTUnwrap(rotatedItem))
        XCTAssertEqual(rotated.refreshToken?.reveal(), "rt-2")
        XCTAssertEqual(rotated.proofKey?.held, key.held, "the rotated token keeps the TPM's key")

        // A program's proof is the TPM's too.
        let grant = try await broker.accessToken(account: "work", proof: try ProofTarget(method: "GET", url: "https://api.example/x", nonce: nil))
        XCTAssertEqual(try verifier.verify(XCTUnwrap(grant.dpopProof?.reveal())).thumbprint, key.thumbprint)

        // The TPM stops answering: the request fails with tpm_unavailable, nothing reaches the server, the item stays.
        holder.down.withLock { $0 = true }
        let posts = http.tokenPosts.count
        await assertThrows(.tpmUnavailable) { _ = try await broker.accessToken(account: "work", forceRefresh: true) }
        await assertThrows(.tpmUnavailable) {
            _ = try await broker.accessToken(account: "work", proof: try ProofTarget(method: "GET", url: "https://api.example/x", nonce: nil))
        }
        XCTAssertEqual(http.tokenPosts.count, posts)
        let kept = await store.items[secretKey]
        XCTAssertEqual(try StoredCredential(stored: XCTUnwrap(kept)).refreshToken?.reveal(), "rt-2")

        // Another TPM (the item copied elsewhere): login_required, said so, and the item is not deleted.
        let elsewhere = self.broker(store, http, holder: FakeKeyHolder())
        do {
            _ = try await elsewhere.accessToken(account: "work")
            XCTFail("another TPM cannot use the key")
        } catch {
            XCTAssertEqual(error.code, .loginRequired)
            XCTAssertTrue(error.message.contains("another TPM"), error.message)
        }
        XCTAssertEqual(http.tokenPosts.count, posts)
        let still = await store.items[secretKey]
        XCTAssertNotNil(still)
    }
}
