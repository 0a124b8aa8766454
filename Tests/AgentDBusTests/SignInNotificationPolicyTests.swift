@testable import AgentDBus
import AuthCore
import Foundation
import XCTest

final class SignInNotificationPolicyTests: XCTestCase {
    func testOncePerAccountUntilItSignsInAgain() {
        var policy = SignInNotificationPolicy()
        XCTAssertEqual(policy.account(toNotifyFor: .signInRequired("work")), "work")
        XCTAssertNil(policy.account(toNotifyFor: .signInRequired("work")), "no second notification")
        XCTAssertNil(policy.account(toNotifyFor: .accountChanged("work")))
        XCTAssertEqual(policy.account(toNotifyFor: .signInRequired("home")), "home", "accounts are independent")
        XCTAssertNil(policy.account(toNotifyFor: .signInStarted("work")))
        XCTAssertNil(policy.account(toNotifyFor: .signInFinished("work")))
        XCTAssertEqual(policy.account(toNotifyFor: .signInRequired("work")), "work", "after a sign-in it may show again")
        XCTAssertNil(policy.account(toNotifyFor: .signInRequired("home")))
    }

    /// Issue 45/46: a host or an app that needed the sign-in is named once per account and caller, after the plain
    /// notice (which the broker sends first), until the account signs in.
    func testAConfinedCallerThatNeededTheSignInIsNamedOnce() {
        var policy = SignInNotificationPolicy()
        XCTAssertEqual(policy.notice(for: .signInRequired("work"))?.by, nil)
        XCTAssertEqual(policy.notice(for: .signInWanted("work", by: "host a over ssh", caller: "ssh:a@SHA256:k"))?.by, "host a over ssh")
        XCTAssertNil(policy.notice(for: .signInWanted("work", by: "host a over ssh", caller: "ssh:a@SHA256:k")), "once per caller")
        XCTAssertNil(policy.notice(for: .signInRequired("work")), "the plain notice does not come back")
        XCTAssertEqual(policy.notice(for: .signInWanted("work", by: "flatpak:org.example.App", caller: "flatpak:org.example.App"))?.by, "flatpak:org.example.App")
        XCTAssertNil(policy.notice(for: .signInFinished("work")))
        XCTAssertEqual(policy.notice(for: .signInWanted("work", by: "host a over ssh", caller: "ssh:a@SHA256:k"))?.account, "work", "after a sign-in")
        let (summary, body) = SignInNotificationPolicy.text(account: "work", by: "host a over ssh")
        XCTAssertEqual(summary, "Sign in to work")
        XCTAssertTrue(body.hasPrefix("host a over ssh asks for tokens of the account 'work'"), body)
        XCTAssertTrue(body.contains("authctl login work") && !body.contains("http"), body)
    }

    /// A host names the program that asks (`program`, its own words): a new name per request is the same caller,
    /// named once; and however many callers there are, at most `maxNamed` notifications until a sign-in.
    func testACallerIsCountedByWhatTheAgentEstablishedNotByWhatItSaid() {
        var policy = SignInNotificationPolicy()
        XCTAssertNotNil(policy.notice(for: .signInWanted("work", by: "host a over ssh (program /x-1)", caller: "ssh:a@SHA256:k")))
        for n in 2...100 {
            XCTAssertNil(policy.notice(for: .signInWanted("work", by: "host a over ssh (program /x-\(n))", caller: "ssh:a@SHA256:k")))
        }
        var shown = 1
        for n in 0..<200 where policy.notice(for: .signInWanted("work", by: "app \(n)", caller: "flatpak:app\(n)")) != nil { shown += 1 }
        XCTAssertEqual(shown, SignInNotificationPolicy.maxNamed)
        XCTAssertNil(policy.notice(for: .signInFinished("work")))
        XCTAssertNotNil(policy.notice(for: .signInWanted("work", by: "app 500", caller: "flatpak:app500")), "counted again after a sign-in")
    }

    func testOtherEventsNeverNotify() {
        var policy = SignInNotificationPolicy()
        for event: BrokerEvent in [.accountChanged("a"), .refreshStarted("a"), .refreshFinished("a"),
                                   .signInStarted("a"), .signInFinished("a"),
                                   .signInExpiring("a", validUntil: Date(), at: Date())] {
            XCTAssertNil(policy.account(toNotifyFor: event), "\(event)")
        }
    }

    func testTextNamesTheAccountAndTheCommand() {
        let (summary, body) = SignInNotificationPolicy.text(account: "work")
        XCTAssertEqual(summary, "Sign in to work")
        XCTAssertTrue(body.contains("'work'"))
        XCTAssertTrue(body.contains("authctl login work"))
        XCTAssertFalse(body.contains("http"))
    }

    func testTheWarningSaysWhenAndWhatToRun() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let (summary, body) = SignInNotificationPolicy.expiringText(account: "work", validUntil: now + 3 * 86400 + 60,
                                                                    now: now)
        XCTAssertEqual(summary, "Sign-in to work ends in 3 days")
        XCTAssertTrue(body.contains("valid until"), body)
        XCTAssertTrue(body.contains("authctl login work"), body)
        XCTAssertEqual(SignInNotificationPolicy.expiringText(account: "work", validUntil: now + 86400, now: now).summary,
                       "Sign-in to work ends in 1 day")
        XCTAssertEqual(SignInNotificationPolicy.expiringText(account: "work", validUntil: now + 600, now: now).summary,
                       "Sign-in to work ends today")
    }

    /// Issue 35: days are counted from whole seconds, as `authctl status` counts them: a warning given within the
    /// second a 2-day sign-in began says 2 days, as status does in that second (it said 1, from the fraction).
    func testTheWarningCountsDaysFromWholeSecondsAsStatusDoes() {
        let until = Date(timeIntervalSince1970: 1_800_000_000 + 2 * 86400)
        let sameSecond = Date(timeIntervalSince1970: 1_800_000_000.9)
        XCTAssertEqual(SignInNotificationPolicy.expiringText(account: "work", validUntil: until, now: sameSecond).summary,
                       "Sign-in to work ends in 2 days")
        XCTAssertEqual(SignInNotificationPolicy.expiringText(account: "work", validUntil: until,
                                                             now: sameSecond.addingTimeInterval(1)).summary,
                       "Sign-in to work ends in 1 day", "a second later, less than 2 whole days are left")
    }
}
