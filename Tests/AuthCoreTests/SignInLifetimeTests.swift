import AuthTestSupport
@testable import AuthCore
import Foundation
import XCTest

/// Sign-ins that end while nobody is looking: the pure rules (SignInDeadline, SignInExpiryWatch, the keyring
/// payload), then the broker on a manual clock. Nothing sleeps.
final class SignInLifetimeTests: XCTestCase {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    let day: TimeInterval = 86400
    let threeDays = Duration.seconds(3 * 86400)
    let key = SecretKey(Fixtures.account())

    // MARK: SignInDeadline

    func testTheServersValueWinsThenTheConfiguredPolicy() {
        let idle = SignInLifetime(period: .seconds(90 * 86400), kind: .idle)
        let fixed = SignInLifetime(period: .seconds(7 * 86400), kind: .fixed)
        XCTAssertEqual(SignInDeadline.afterSignIn(now: t0, serverSeconds: 100, policy: idle), t0 + 100)
        XCTAssertEqual(SignInDeadline.afterSignIn(now: t0, serverSeconds: nil, policy: idle), t0 + 90 * day)
        XCTAssertNil(SignInDeadline.afterSignIn(now: t0, serverSeconds: nil, policy: nil), "unknown stays unknown")

        let before = t0 + 5 * day
        XCTAssertEqual(SignInDeadline.afterRefresh(now: t0 + day, serverSeconds: 100, policy: fixed, previous: before),
                       t0 + day + 100, "the server's word replaces the old deadline")
        XCTAssertEqual(SignInDeadline.afterRefresh(now: t0 + day, serverSeconds: nil, policy: idle, previous: before),
                       t0 + 91 * day, "an idle period starts again")
        XCTAssertEqual(SignInDeadline.afterRefresh(now: t0 + day, serverSeconds: nil, policy: fixed, previous: before),
                       before, "a fixed one does not move")
        XCTAssertNil(SignInDeadline.afterRefresh(now: t0, serverSeconds: nil, policy: fixed, previous: nil),
                     "a fixed period needs the sign-in's date, which an old keyring item lacks")
    }

    func testASlidingDeadlineIsWrittenOnceADayAnEarlierOneAtOnce() {
        XCTAssertTrue(SignInDeadline.needsWrite(t0, stored: nil))
        XCTAssertFalse(SignInDeadline.needsWrite(nil, stored: t0))
        XCTAssertFalse(SignInDeadline.needsWrite(t0 + 3600, stored: t0), "an hour's slide waits")
        XCTAssertTrue(SignInDeadline.needsWrite(t0 + day, stored: t0))
        XCTAssertTrue(SignInDeadline.needsWrite(t0 - 120, stored: t0), "shortened by the server")
    }

    // MARK: SignInExpiryWatch, step by step

    func testWarnsOnceADayInsideTheWindowThenReportsTheEndOnce() {
        var watch = SignInExpiryWatch()
        let until = t0 + 10 * day
        watch.update(until, now: t0, warnBefore: threeDays)
        XCTAssertEqual(watch.step(now: t0, warnBefore: threeDays), .none)
        XCTAssertEqual(watch.nextStep(after: t0, warnBefore: threeDays), t0 + 7 * day, "the window opens 3 days ahead")

        XCTAssertEqual(watch.step(now: t0 + 7 * day, warnBefore: threeDays), .warn(validUntil: until))
        XCTAssertEqual(watch.step(now: t0 + 7 * day + 60, warnBefore: threeDays), .none, "once")
        XCTAssertEqual(watch.nextStep(after: t0 + 7 * day + 60, warnBefore: threeDays), t0 + 8 * day)
        XCTAssertEqual(watch.step(now: t0 + 8 * day - 1, warnBefore: threeDays), .none, "not twice in a day")
        XCTAssertEqual(watch.step(now: t0 + 8 * day, warnBefore: threeDays), .warn(validUntil: until), "the next day")
        XCTAssertFalse(watch.hasEnded(at: t0 + 10 * day - 1))

        XCTAssertEqual(watch.step(now: until, warnBefore: threeDays), .ended(validUntil: until))
        XCTAssertTrue(watch.hasEnded(at: until))
        XCTAssertEqual(watch.step(now: until + day, warnBefore: threeDays), .none, "the end is reported once")
        XCTAssertNil(watch.nextStep(after: until + day, warnBefore: threeDays))
    }

    func testANewSignInStartsAfreshARefreshInsideTheWindowDoesNotRepeatTheWarning() {
        var watch = SignInExpiryWatch()
        watch.update(t0 + 2 * day, now: t0, warnBefore: threeDays)
        XCTAssertEqual(watch.step(now: t0, warnBefore: threeDays), .warn(validUntil: t0 + 2 * day))
        // A server that slides the deadline by an hour, still inside the window: no second warning today.
        watch.update(t0 + 2 * day + 3600, now: t0 + 3600, warnBefore: threeDays)
        XCTAssertEqual(watch.step(now: t0 + 3600, warnBefore: threeDays), .none)
        // A new sign-in, 90 days out: nothing now, a warning again when its window opens.
        watch.update(t0 + 90 * day, now: t0 + 7200, warnBefore: threeDays)
        XCTAssertEqual(watch.step(now: t0 + 7200, warnBefore: threeDays), .none)
        XCTAssertEqual(watch.step(now: t0 + 87 * day, warnBefore: threeDays), .warn(validUntil: t0 + 90 * day))
        // Signed out: nothing to watch.
        watch.update(nil, now: t0 + 88 * day, warnBefore: threeDays)
        XCTAssertEqual(watch.step(now: t0 + 95 * day, warnBefore: threeDays), .none)
        XCTAssertNil(watch.nextStep(after: t0 + 95 * day, warnBefore: threeDays))
    }

    func testNoWarningWindowMeansOnlyTheEnd() {
        var watch = SignInExpiryWatch(validUntil: t0 + day)
        XCTAssertEqual(watch.step(now: t0 + day - 1, warnBefore: .zero), .none)
        XCTAssertEqual(watch.step(now: t0 + day, warnBefore: .zero), .ended(validUntil: t0 + day))
    }

    // MARK: The keyring payload and the token reply

    func testRefreshTokenExpiresInIsReadAndNeverFailsTheReply() throws {
        func parse(_ json: String) throws -> TokenSet {
            try TokenResponseParser.parse(HTTPReply(status: 200, body: Array(json.utf8)), receivedAt: .now)
        }
        let base = #""access_token":"a","token_type":"Bearer","expires_in":28800,"refresh_token":"r""#
        XCTAssertEqual(try parse("{\(base),\"refresh_token_expires_in\":15897600}").refreshTokenLifetime, 15_897_600)
        XCTAssertEqual(try parse("{\(base),\"refresh_token_expires_in\":\"15897600\"}").refreshTokenLifetime, 15_897_600)
        XCTAssertNil(try parse("{\(base)}").refreshTokenLifetime)
        XCTAssertNil(try parse("{\(base),\"refresh_token_expires_in\":\"soon\"}").refreshTokenLifetime)
        XCTAssertNil(try parse("{\(base),\"refresh_token_expires_in\":-5}").refreshTokenLifetime)
    }

    // MARK: The broker, on a manual clock

    func reply(access: String, refresh: String, refreshLifetime: Int?) -> HTTPReply {
        var object: [String: Any] = ["access_token": access, "token_type": "Bearer", "expires_in": 3600, "refresh_token": refresh]
        if let refreshLifetime { object["refresh_token_expires_in"] = refreshLifetime }
        return HTTPReply(status: 200, body: Array(try! JSONSerialization.data(withJSONObject: object)))
    }

    func testTheServersDeadlineIsStoredShownReadBackAfterARestartAndWatched() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        var account = Fixtures.account()
        account.signInWarning = .seconds(100)
        http.tokenReplies = [reply(access: "at-1", refresh: "rt-2", refreshLifetime: 1000)]
        let broker = Fixtures.broker(accounts: [account], store: store, http: http, clock: clock)
        let noDeadline = await broker.status()
        XCTAssertNil(noDeadline.accounts[0].signInValidUntil, "an old keyring item: unknown")
        _ = try await broker.accessToken(account: "work")

        let until = clock.wallClock() + 1000
        let shown = await broker.status()
        XCTAssertEqual(shown.accounts[0].signInValidUntil, until)
        let item = await store.entries[key]
        let stored = try XCTUnwrap(item)
        XCTAssertEqual(stored.secret, Secret("rt-2"), "the bare token: the date is not in the secret")
        XCTAssertEqual(stored.validUntil, until, "written with the rotated token")

        // A restart: a new broker over the same keyring knows the deadline before any use.
        let restarted = Fixtures.broker(accounts: [account], store: store, http: FakeHTTP(), clock: clock)
        let events = restarted.events()
        _ = await restarted.checkSignInLifetimes()
        let afterRestart = await restarted.status()
        XCTAssertEqual(afterRestart.accounts[0].signInValidUntil, until)

        // Inside the warning window: one warning; at the end: sign-in required. The refresh token stays.
        clock.advance(.seconds(899))
        var wait = await restarted.checkSignInLifetimes()
        XCTAssertEqual(wait, .seconds(1), "the next pass is when the window opens")
        clock.advance(.seconds(1))
        wait = await restarted.checkSignInLifetimes()
        XCTAssertEqual(wait, .seconds(100), "then at the end")
        _ = await restarted.checkSignInLifetimes()
        clock.advance(.seconds(100))
        _ = await restarted.checkSignInLifetimes()
        _ = await restarted.checkSignInLifetimes()
        let seen = await SystemTimeSource().within(.seconds(5), fallback: [BrokerEvent]()) {
            var seen: [BrokerEvent] = []
            for await event in events {
                seen.append(event)
                if case .signInRequired = event { break }
            }
            return seen
        }
        XCTAssertEqual(seen, [.signInExpiring("work", validUntil: until, at: until - 100), .signInRequired("work")])
        let kept = await store.items[key]
        XCTAssertNotNil(kept, "a passed deadline never deletes the refresh token")
    }

    func testAnIdlePolicySlidesWithRefreshesAndIsWrittenWhenItMovedADay() async throws {
        let store = MemorySecretStore(items: [key: Secret("rt-1")])
        let http = FakeHTTP()
        let clock = ManualClock()
        var account = Fixtures.account()
        account.signInLifetime = SignInLifetime(period: .seconds(90 * 86400), kind: .idle)
        // Google-like: no rotation, so only the deadline changes what is stored.
        http.tokenReplies = [FakeHTTP.tokenReply(access: "at-1"), FakeHTTP.tokenReply(access: "at-2"),
                             FakeHTTP.tokenReply(access: "at-3")]
        let broker = Fixtures.broker(accounts: [account], store: store, http: http, clock: clock)
        _ = try await broker.accessToken(account: "work")
        let first = clock.wallClock() + 90 * day
        var stored = await store.entries[key]
        XCTAssertEqual(stored?.validUntil, first, "an old item learns its deadline")
        XCTAssertEqual(stored?.secret, Secret("rt-1"))

        clock.advance(.seconds(7200))
        _ = try await broker.accessToken(account: "work", forceRefresh: true)
        let slid = await broker.status()
        XCTAssertEqual(slid.accounts[0].signInValidUntil, first + 7200, "status shows the slide at once")
        stored = await store.entries[key]
        XCTAssertEqual(stored?.validUntil, first, "two hours' slide: not written yet")

        clock.advance(.seconds(86400))
        _ = try await broker.accessToken(account: "work", forceRefresh: true)
        stored = await store.entries[key]
        XCTAssertEqual(stored?.validUntil, first + 7200 + 86400)
    }

    func testARestartedAgentDoesNotRepeatTheDaysWarning() async throws {
        let store = MemorySecretStore(entries: [key: KeyringItem(secret: Secret("rt-1"), validUntil: t0 + 2 * day)])
        let clock = ManualClock()
        let first = Fixtures.broker(store: store, clock: clock)
        let firstEvents = first.events()
        _ = await first.checkSignInLifetimes()
        let expected = BrokerEvent.signInExpiring("work", validUntil: t0 + 2 * day, at: t0)
        let warned = await SystemTimeSource().within(.seconds(5), fallback: false) {
            for await event in firstEvents where event == expected {
                return true
            }
            return false
        }
        XCTAssertTrue(warned)
        var item = await store.entries[key]
        XCTAssertEqual(item?.warnedAt, t0, "the warning is noted in the item")
        XCTAssertEqual(item?.secret, Secret("rt-1"), "the token is untouched")

        // Started again an hour later (socket activation after an idle exit): no second warning that day.
        clock.advance(.seconds(3600))
        let second = Fixtures.broker(store: store, clock: clock)
        _ = await second.checkSignInLifetimes()
        clock.advance(.seconds(86400 - 3600 - 1))
        _ = await second.checkSignInLifetimes()
        item = await store.entries[key]
        XCTAssertEqual(item?.warnedAt, t0, "nothing warned, nothing written")
        // A day after the first warning, the next one.
        clock.advance(.seconds(1))
        _ = await second.checkSignInLifetimes()
        item = await store.entries[key]
        XCTAssertEqual(item?.warnedAt, t0 + day)
    }

    /// A browser sign-in of `account`, left pending: the test delivers the redirect's query.
    func pendingSignIn(_ broker: TokenBroker, _ browser: FakeBrowser) async throws -> (LoginTicket, state: String) {
        let ticket = try await broker.beginLogin(account: "work")
        return (ticket, try XCTUnwrap(browser.lastQuery["state"]?.first))
    }

    /// Issue 35: a sign-in the server says ends within the warning window warns at once, and that warning is in the
    /// keyring item by the time the sign-in returns. The agent may stop right after (the default idle exit); started
    /// again the same day, it does not repeat it.
    func testAWarningDueAtSignInIsInTheItemTheSignInWrote() async throws {
        let store = MemorySecretStore()
        let http = FakeHTTP()
        let redirects = FakeRedirects()
        let browser = FakeBrowser()
        let clock = ManualClock()
        let account = Fixtures.account(scopes: ["read"])
        let broker = Fixtures.broker(accounts: [account], store: store, http: http, redirects: redirects,
                                     browser: browser, clock: clock)
        let events = broker.events()
        let watch = Task { await broker.runSignInLifetimeWatch() }
        let (ticket, state) = try await pendingSignIn(broker, browser)
        http.tokenReplies = [reply(access: "at-1", refresh: "rt-1", refreshLifetime: 2 * 86400)]
        XCTAssertEqual(redirects.deliver("code=the-code&state=\(state)"), .success)
        _ = try await broker.awaitLogin(ticket)
        let item = await store.entries[key]
        XCTAssertEqual(item?.validUntil, t0 + 2 * day)
        XCTAssertEqual(item?.warnedAt, t0, "the warning is in the item the sign-in wrote")
        let warned = await SystemTimeSource().within(.seconds(5), fallback: false) {
            for await event in events {
                if case .signInExpiring = event { return true }
            }
            return false
        }
        XCTAssertTrue(warned, "the warning was given")
        watch.cancel()

        // Stopped by the idle exit, started again an hour later: nothing to repeat, nothing written.
        clock.advance(.seconds(3600))
        let restarted = Fixtures.broker(accounts: [account], store: store, http: FakeHTTP(), clock: clock)
        _ = await restarted.checkSignInLifetimes()
        let after = await store.entries[key]
        XCTAssertEqual(after?.warnedAt, t0, "no second warning that day")
    }

    /// Issue 35: a warning that falls due while a sign-in is pending cannot be written then (the sign-in's own write
    /// must win); it is written when the sign-in ends, here refused by the user, so the old item keeps it.
    func testAWarningGivenWhileASignInIsPendingIsWrittenWhenTheSignInEnds() async throws {
        let store = MemorySecretStore(entries: [key: KeyringItem(secret: Secret("rt-1"), validUntil: t0 + 2 * day)])
        let redirects = FakeRedirects()
        let browser = FakeBrowser()
        let account = Fixtures.account(scopes: ["read"])
        let broker = Fixtures.broker(accounts: [account], store: store, redirects: redirects, browser: browser)
        let (ticket, state) = try await pendingSignIn(broker, browser)
        _ = await broker.checkSignInLifetimes()
        var item = await store.entries[key]
        XCTAssertNil(item?.warnedAt, "not written while the sign-in is pending")
        XCTAssertEqual(redirects.deliver("error=access_denied&state=\(state)"), .denied)
        await assertThrows(.accessDenied) { _ = try await broker.awaitLogin(ticket) }
        item = await store.entries[key]
        XCTAssertEqual(item?.warnedAt, t0, "written when the sign-in ended")
        XCTAssertEqual(item?.secret, Secret("rt-1"))
    }

    /// A sign-in whose keyring write fails gives no warning of a deadline the keyring does not hold, and the watch
    /// keeps the old item's date, so it warns of that one when due.
    func testASignInTheKeyringRefusedGivesNoWarningAndKeepsTheOldDate() async throws {
        let store = MemorySecretStore(entries: [key: KeyringItem(secret: Secret("rt-1"), validUntil: t0 + 30 * day)])
        let http = FakeHTTP()
        let redirects = FakeRedirects()
        let browser = FakeBrowser()
        let broker = Fixtures.broker(accounts: [Fixtures.account(scopes: ["read"])], store: store, http: http,
                                     redirects: redirects, browser: browser)
        _ = await broker.checkSignInLifetimes()
        let (ticket, state) = try await pendingSignIn(broker, browser)
        http.tokenReplies = [reply(access: "at-1", refresh: "rt-2", refreshLifetime: 2 * 86400)]
        await store.setState(.error)
        XCTAssertEqual(redirects.deliver("code=the-code&state=\(state)"), .success)
        await assertThrows(.keyringError) { _ = try await broker.awaitLogin(ticket) }
        await store.setState(.available)
        let status = await broker.status()
        XCTAssertEqual(status.accounts[0].signInValidUntil, t0 + 30 * day, "the date the keyring holds")
        let item = await store.entries[key]
        XCTAssertNil(item?.warnedAt)
    }

    func testSignOutForgetsTheDeadline() async throws {
        let store = MemorySecretStore(entries: [key: KeyringItem(secret: Secret("rt-1"), validUntil: t0 + day)])
        let broker = Fixtures.broker(store: store)
        _ = await broker.checkSignInLifetimes()
        let before = await broker.status()
        XCTAssertEqual(before.accounts[0].signInValidUntil, t0 + day)
        _ = try await broker.logout(account: "work")
        let after = await broker.status()
        XCTAssertNil(after.accounts[0].signInValidUntil)
    }
}
