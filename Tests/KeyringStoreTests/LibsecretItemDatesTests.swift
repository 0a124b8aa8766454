import AuthCore
import Foundation
import KeyringStore
import XCTest

/// The sign-in's dates as attributes of the real keyring item (gnome-keyring, see ``KeyringTest``): the secret stays
/// the bare credential that any Secret Service client, an older agent included, reads; a write updates the one item
/// in place whatever dates it had; an item written the way earlier agents did is still found and taken over.
final class LibsecretItemDatesTests: XCTestCase {
    let until = Date(timeIntervalSince1970: 1_900_000_000)
    let warned = Date(timeIntervalSince1970: 1_899_900_000)

    override func setUp() async throws {
        try await KeyringTest.require()
    }

    func lookup(_ key: SecretKey) throws -> ProcessResult {
        try runProcess(["secret-tool", "lookup", "account", key.account, "issuer", key.issuer, "client_id", key.clientID])
    }

    /// `secret-tool search --all` for the key: one dictionary of attributes per item (`secret` left out).
    func items(_ key: SecretKey) throws -> [[String: String]] {
        let search = try runProcess(["secret-tool", "search", "--all", "account", key.account, "issuer", key.issuer,
                                     "client_id", key.clientID])
        var items: [[String: String]] = []
        for line in search.output.split(separator: "\n") {
            if line.hasPrefix("[/") {
                items.append([:])
            } else if let range = line.range(of: " = "), !items.isEmpty {
                let name = String(line[..<range.lowerBound])
                if name != "secret" { items[items.count - 1][name] = String(line[range.upperBound...]) }
            }
        }
        return items
    }

    func testTheDatesAreAttributesAndTheSecretIsTheBareToken() async throws {
        let store = LibsecretStore()
        let key = KeyringTest.uniqueKey()
        try await store.store(KeyringItem(secret: Secret("rt-1"), validUntil: until, warnedAt: warned), for: key)

        let loaded1 = try await store.loadItem(key)
        XCTAssertEqual(loaded1, KeyringItem(secret: Secret("rt-1"), validUntil: until, warnedAt: warned))
        let seen = try lookup(key)
        XCTAssertEqual(seen.status, 0, seen.output)
        XCTAssertEqual(seen.output, "rt-1", "another client (an older agent) reads the bare token")
        let found = try items(key)
        XCTAssertEqual(found.count, 1, "\(found)")
        XCTAssertEqual(found.first?["attribute.valid_until"], "1900000000")
        XCTAssertEqual(found.first?["attribute.warned_at"], "1899900000")
        XCTAssertEqual(found.first?["schema"], "dev.auth-agent.RefreshToken")
        try await store.delete(key)
        let loaded2 = try await store.loadItem(key)
        XCTAssertNil(loaded2)
    }

    func testAWriteReplacesTheOneItemWhateverDatesItHad() async throws {
        let store = LibsecretStore()
        let key = KeyringTest.uniqueKey()
        try await store.store(KeyringItem(secret: Secret("rt-1"), validUntil: until), for: key)
        try await store.store(KeyringItem(secret: Secret("rt-2"), validUntil: until + 86400, warnedAt: warned), for: key)
        let loaded3 = try await store.loadItem(key)
        XCTAssertEqual(loaded3,
                       KeyringItem(secret: Secret("rt-2"), validUntil: until + 86400, warnedAt: warned))
        let moved = try items(key)
        XCTAssertEqual(moved.count, 1, "replaced in place, not a second item: \(moved)")
        XCTAssertEqual(moved.first?["schema"], "dev.auth-agent.RefreshToken", "new dates keep the schema's name")
        XCTAssertEqual(try lookup(key).output, "rt-2")

        try await store.store(KeyringItem(secret: Secret("rt-3")), for: key)
        let loaded4 = try await store.loadItem(key)
        XCTAssertEqual(loaded4, KeyringItem(secret: Secret("rt-3")), "dates not given are removed")
        let found = try items(key)
        XCTAssertEqual(found.count, 1, "\(found)")
        XCTAssertNil(found.first?["attribute.valid_until"])
        XCTAssertNil(found.first?["attribute.warned_at"])
        XCTAssertEqual(found.first?["label"], LibsecretStore.defaultLabel(key))
        try await store.delete(key)
        XCTAssertEqual(try items(key).count, 0)
    }

    /// A rotation usually keeps the dates: only the secret is written then (each write has the keyring rewrite its
    /// file). Whichever one date changes, it is written.
    func testARotationThatKeepsTheDatesChangesTheSecretAndEachChangedDateIsWritten() async throws {
        let store = LibsecretStore()
        let key = KeyringTest.uniqueKey()
        try await store.store(KeyringItem(secret: Secret("rt-1"), validUntil: until, warnedAt: warned), for: key)
        try await store.store(KeyringItem(secret: Secret("rt-2"), validUntil: until, warnedAt: warned), for: key)
        let rotated = try await store.loadItem(key)
        XCTAssertEqual(rotated, KeyringItem(secret: Secret("rt-2"), validUntil: until, warnedAt: warned))
        XCTAssertEqual(try lookup(key).output, "rt-2")

        try await store.store(KeyringItem(secret: Secret("rt-2"), validUntil: until, warnedAt: warned + 60), for: key)
        let warnedAgain = try await store.loadItem(key)
        XCTAssertEqual(warnedAgain, KeyringItem(secret: Secret("rt-2"), validUntil: until, warnedAt: warned + 60))
        try await store.store(KeyringItem(secret: Secret("rt-3"), validUntil: until + 1, warnedAt: warned + 60),
                              for: key)
        let extended = try await store.loadItem(key)
        XCTAssertEqual(extended, KeyringItem(secret: Secret("rt-3"), validUntil: until + 1, warnedAt: warned + 60))
        try await store.store(KeyringItem(secret: Secret("rt-4"), validUntil: until + 1), for: key)
        let unwarned = try await store.loadItem(key)
        XCTAssertEqual(unwarned, KeyringItem(secret: Secret("rt-4"), validUntil: until + 1))
        let found = try items(key)
        XCTAssertEqual(found.count, 1, "\(found)")
        XCTAssertNil(found.first?["attribute.warned_at"])
        XCTAssertEqual(found.first?["schema"], "dev.auth-agent.RefreshToken")
        try await store.delete(key)
    }

    func testAnItemWithoutDatesIsReadAsItIsAndTakenOverByTheNextWrite() async throws {
        let store = LibsecretStore()
        let key = KeyringTest.uniqueKey()
        // What agents before the dates wrote: the key's three attributes only.
        let bare = "rt-0"
        let written = try runProcess(["secret-tool", "store", "--label=\(LibsecretStore.defaultLabel(key))",
                                      "xdg:schema", "dev.auth-agent.RefreshToken", "account", key.account,
                                      "issuer", key.issuer, "client_id", key.clientID], input: bare)
        XCTAssertEqual(written.status, 0, written.output)
        let loaded5 = try await store.loadItem(key)
        XCTAssertEqual(loaded5, KeyringItem(secret: Secret(bare)),
                       "the secret as stored, no attribute dates")

        try await store.store(KeyringItem(secret: Secret("rt-1"), validUntil: until), for: key)
        let loaded6 = try await store.loadItem(key)
        XCTAssertEqual(loaded6, KeyringItem(secret: Secret("rt-1"), validUntil: until))
        XCTAssertEqual(try lookup(key).output, "rt-1")
        XCTAssertEqual(try items(key).count, 1, "the old item was updated, not joined by a new one")
        try await store.delete(key)
    }

    func testAnOlderAgentsWriteReplacesTheItemInPlace() async throws {
        let store = LibsecretStore()
        let key = KeyringTest.uniqueKey()
        try await store.store(KeyringItem(secret: Secret("rt-1"), validUntil: until), for: key)
        // An older agent stores with the key's three attributes (libsecret's create-with-replace): the Secret
        // Service replaces the item that has them, dates or not.
        let older = try runProcess(["secret-tool", "store", "--label=\(LibsecretStore.defaultLabel(key))",
                                    "xdg:schema", "dev.auth-agent.RefreshToken", "account", key.account,
                                    "issuer", key.issuer, "client_id", key.clientID], input: "rt-2")
        XCTAssertEqual(older.status, 0, older.output)
        XCTAssertEqual(try items(key).count, 1, "still one item")
        let loaded7 = try await store.loadItem(key)?.secret
        XCTAssertEqual(loaded7, Secret("rt-2"))
        try await store.delete(key)
    }
}
