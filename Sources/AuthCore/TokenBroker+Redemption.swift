/// One refresh-token redemption at a time per keyring item. Every entry of an account (the default token and each
/// scope subset or RFC 8707 resource) has its own single flight, but all redeem the account's one refresh token;
/// taking turns means a rotated refresh token is in the keyring before its access token is used, and every other
/// entry refreshes with whatever is stored then. Whatever else reads the item and writes it back (a sign-in's
/// result, a sign-out, the warning's date) takes the same turn, so it never crosses a rotation in flight.
///
/// The turn and a rotated token the keyring refused belong to the item (``SecretKey``), not to the account's state:
/// a reload that resets or removes the account keeps both, so a refresh begun before it finishes its turn and the
/// next one waits for it, and the refused token is still the one redeemed next.
extension TokenBroker {
    struct CredentialSlot {
        var redeeming = false
        var waiters: [CheckedContinuation<Void, Never>] = []
        /// A rotated refresh token the keyring refused to take; used (and saved) on the next refresh.
        var unsaved: Secret?

        /// Holds nothing (no turn taken, no token waiting for the keyring): not kept.
        var isIdle: Bool { !redeeming && unsaved == nil }
    }

    /// Changes `key`'s slot, made when missing and dropped once idle.
    private func updateCredential(_ key: SecretKey, _ change: (inout CredentialSlot) -> Void) {
        var slot = credentials[key] ?? CredentialSlot()
        change(&slot)
        credentials[key] = slot.isIdle ? nil : slot
    }

    /// Waits until nothing else is redeeming or rewriting the item's refresh token.
    func acquireRedemption(_ key: SecretKey) async {
        guard credentials[key]?.redeeming == true else {
            updateCredential(key) { $0.redeeming = true }
            return
        }
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            updateCredential(key) { $0.waiters.append(waiter) }
        }
    }

    /// Hands the turn to the next waiter (it stays taken), or frees it.
    func releaseRedemption(_ key: SecretKey) {
        updateCredential(key) { slot in
            if slot.waiters.isEmpty {
                slot.redeeming = false
            } else {
                slot.waiters.removeFirst().resume()
            }
        }
    }

    /// The rotated refresh token of `key` that the keyring has not taken yet, if any.
    func unsavedRefreshToken(_ key: SecretKey) -> Secret? { credentials[key]?.unsaved }

    func setUnsavedRefreshToken(_ key: SecretKey, _ token: Secret?) {
        updateCredential(key) { $0.unsaved = token }
    }
}
