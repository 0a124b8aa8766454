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
