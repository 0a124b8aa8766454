import FoundationEssentials
import Logging
import TimeText

/// Sign-ins that end while nobody is looking: each account's "sign-in valid until" (``SignInDeadline``: the server's
/// `refresh_token_expires_in`, else the configured ``SignInLifetime``), kept in the credential's keyring item beside
/// the secret (``KeyringItem``: libsecret attributes, never inside the secret), shown by `status`, and watched (``SignInExpiryWatch``): a warning
/// (journal line and ``BrokerEvent/signInExpiring(_:validUntil:at:)``, which the desktop notification follows) when the
/// end is near, and ``BrokerEvent/signInRequired(_:)`` once it passed.
///
/// A passed deadline is advice, not proof: the refresh token stays in the keyring and a token request still tries
/// it (the server decides; a refused one is forgotten as any dead refresh token is). The user's stated policy may be
/// wrong, and clocks differ.
extension TokenBroker {
    /// One account's sign-in deadline as the broker knows it.
    struct LifetimeRecord: Sendable {
        var watch = SignInExpiryWatch()
        /// The deadline in the keyring item's attributes, as last read or written.
        var stored: Date?
        /// The keyring item was read (or written) since the agent started: the watch knows what the keyring knows.
        var known = false
        /// A warning was given while the item could not be rewritten for it (a sign-in pending): the next write of
        /// the item carries it, and the end of the sign-in writes it if nothing else did (``storeUnsavedWarning(_:)``).
        var warningUnsaved = false
    }

    /// A sign-in just finished: its deadline, to be written with the refresh token that follows, and what the watch
    /// says of it at `now`. A warning due at once is decided here, so that the sign-in's own write records it
    /// (`warned_at`) and the caller gives it (``announce(_:_:at:)``) once that write succeeded; left to the watch's
    /// next pass it would find the sign-in pending, could not write it, and an agent stopped by its idle exit would
    /// give it again at every start.
    func noteSignIn(_ name: String, _ tokens: TokenSet, now: Date) -> SignInExpiryWatch.Action {
        guard let config = accounts[name]?.config else { return .none }
        let deadline = SignInDeadline.afterSignIn(now: now, serverSeconds: tokens.refreshTokenLifetime,
                                                  policy: config.signInLifetime)
        setDeadline(name, deadline, now: now)
        return stepWatch(name, now: now)
    }

    /// A refresh succeeded: the deadline moves if the server said so or the period is idle.
    func noteRefresh(_ name: String, _ tokens: TokenSet) {
        guard let state = accounts[name] else { return }
        let deadline = SignInDeadline.afterRefresh(now: time.wallClock(), serverSeconds: tokens.refreshTokenLifetime,
                                                   policy: state.config.signInLifetime,
                                                   previous: state.lifetime.watch.validUntil)
        setDeadline(name, deadline, now: time.wallClock())
    }

    private func setDeadline(_ name: String, _ deadline: Date?, now: Date) {
        guard let config = accounts[name]?.config else { return }
        accounts[name]?.lifetime.watch.update(deadline, now: now, warnBefore: config.signInWarning)
        accounts[name]?.lifetime.known = true
        lifetimeBell.ring()
    }

    /// The item to write for `credential` (the bare secret): the account's current deadline and last warning beside
    /// it (the deadline remembered as stored).
    func itemForKeyring(_ credential: Secret, account name: String) -> KeyringItem {
        let watch = accounts[name]?.lifetime.watch
        accounts[name]?.lifetime.stored = watch?.validUntil
        accounts[name]?.lifetime.warningUnsaved = false
        return KeyringItem(secret: credential, validUntil: watch?.validUntil, warnedAt: watch?.lastWarned)
    }

    /// An item read from the keyring: the credential, after learning the deadline it carries (unless this run
    /// already knows a newer one from a sign-in or refresh).
    func credentialFromKeyring(_ item: KeyringItem, account name: String) -> Secret {
        if let config = accounts[name]?.config, accounts[name]?.lifetime.known == false {
            accounts[name]?.lifetime.watch.update(item.validUntil, now: time.wallClock(), warnBefore: config.signInWarning)
            accounts[name]?.lifetime.watch.restoreWarning(item.warnedAt)
            accounts[name]?.lifetime.stored = item.validUntil
            accounts[name]?.lifetime.known = true
            lifetimeBell.ring()
        }
        return item.secret
    }

    /// After a refresh that kept its refresh token: writes the moved deadline when ``SignInDeadline/needsWrite(_:stored:)``
    /// says so. A failure only costs the stored deadline's accuracy, never the sign-in.
    func storeMovedDeadline(_ name: String, credential: Secret, key: SecretKey) async {
        guard let record = accounts[name]?.lifetime,
              SignInDeadline.needsWrite(record.watch.validUntil, stored: record.stored) else { return }
        do throws(AuthError) {
            try await storeRefreshToken(credential, for: key)
        } catch {
            logger.notice("cannot store the sign-in's new end in the keyring", metadata: [
                "account": "\(name)", "error_code": "\(error.code.rawValue)"])
        }
    }

    /// Writes that the user was warned into the keyring item, so a restarted agent (socket activation, idle exit)
    /// does not warn again the same day. The item is read and written back under the account's redemption turn, so
    /// a refresh cannot rotate the token in between. While a sign-in is pending (its own write wins), it is left to
    /// that write, or to the end of the sign-in (``storeUnsavedWarning(_:)``).
    func storeWarning(_ name: String) async {
        guard let config = accounts[name]?.config else { return }
        let key = SecretKey(config)
        await acquireRedemption(key)
        defer { releaseRedemption(key) }
        guard warningWritable(name), let item = try? await keyring.item(key), warningWritable(name) else { return }
        do throws(AuthError) {
            try await storeRefreshToken(item.secret, for: key)
        } catch {
            logger.debug("cannot note the warning in the keyring", metadata: ["account": "\(name)",
                                                                             "error_code": "\(error.code.rawValue)"])
        }
    }

    /// Whether the item may be rewritten for a warning now; if not, the warning is marked as waiting for a write.
    private func warningWritable(_ name: String) -> Bool {
        guard let state = accounts[name] else { return false }
        guard state.signIn.isPending else { return true }
        accounts[name]?.lifetime.warningUnsaved = true
        return false
    }

    /// A sign-in ended (either way): a warning given while it was pending and not written since is written now,
    /// before the sign-in's callers get their answer (after which the idle exit may stop the agent).
    func storeUnsavedWarning(_ name: String) async {
        guard accounts[name]?.lifetime.warningUnsaved == true else { return }
        await storeWarning(name)
    }

    /// The sign-in ended on our side (sign-out, a dead refresh token): no deadline any more.
    func forgetDeadline(_ name: String) {
        accounts[name]?.lifetime = LifetimeRecord(known: true)
    }

    /// Reads the deadline of every account whose keyring item was not read in this run (after a restart), so
    /// `status` and the warnings know it before the account is used. One search of the attributes, then one load per
    /// such item; with the keyring locked or absent, nothing is read and the next check tries again.
    func readStoredDeadlines() async {
        let unread = accountOrder.filter { accounts[$0]?.lifetime.known == false }
        guard !unread.isEmpty, let stored = await keyring.storedKeysIfAvailable() else { return }
        for name in unread {
            guard let config = accounts[name]?.config, accounts[name]?.lifetime.known == false else { continue }
            let key = SecretKey(config)
            guard stored.contains(key) else {
                accounts[name]?.lifetime.known = true
                continue
            }
            guard let item = try? await keyring.item(key) else { continue }
            _ = credentialFromKeyring(item, account: name)
        }
    }

    /// One pass of the watch: reads unknown deadlines, logs and publishes what is due. Returns how long until the
    /// next pass may have something to do (at most `ceiling`: the wall clock may jump or the machine sleep).
    @discardableResult
    public func checkSignInLifetimes(ceiling: Duration = .seconds(3600)) async -> Duration {
        await readStoredDeadlines()
        let now = time.wallClock()
        var next = ceiling
        for name in accountOrder {
            guard let state = accounts[name] else { continue }
            let warnBefore = state.config.signInWarning
            let action = stepWatch(name, now: now)
            announce(name, action, at: now)
            if case .warn = action { await storeWarning(name) }
            if let at = accounts[name]?.lifetime.watch.nextStep(after: now, warnBefore: warnBefore) {
                next = min(next, .milliseconds(Int64(max(at.timeIntervalSince(now), 0) * 1000)))
            }
        }
        return max(next, .milliseconds(200))
    }

    /// Steps the account's watch: what is due at `now` (recorded as done; the caller gives it).
    private func stepWatch(_ name: String, now: Date) -> SignInExpiryWatch.Action {
        guard let warnBefore = accounts[name]?.config.signInWarning else { return .none }
        return accounts[name]?.lifetime.watch.step(now: now, warnBefore: warnBefore) ?? .none
    }

    /// Gives what the watch decided at `now`: the journal line and the event the desktop notification follows.
    func announce(_ name: String, _ action: SignInExpiryWatch.Action, at now: Date) {
        switch action {
        case .none:
            break
        case .warn(let until):
            let days = DaysLeft.count(until: until.timeIntervalSince1970, now: now.timeIntervalSince1970)
            logger.notice("the sign-in ends soon; sign in again when it suits you (authctl login)", metadata: [
                "account": "\(name)", "valid_until": "\(until.formatted(.iso8601))", "days_left": "\(days)"])
            publish(.signInExpiring(name, validUntil: until, at: now))
        case .ended(let until):
            logger.notice("the sign-in has reached its end; the account needs a new sign-in (authctl login)", metadata: [
                "account": "\(name)", "valid_until": "\(until.formatted(.iso8601))"])
            publish(.signInRequired(name))
        }
    }

    /// Runs until cancelled: the sign-in lifetime watch (warnings and ends), woken early when a deadline changes.
    public func runSignInLifetimeWatch() async {
        while !Task.isCancelled {
            let wait = await checkSignInLifetimes()
            guard await lifetimeBell.sleep(for: wait, on: time) else { return }
        }
    }
}
