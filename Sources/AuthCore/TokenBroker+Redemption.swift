/// One refresh-token redemption at a time per keyring item. Every entry of an account (the default token and each
/// scope subset or RFC 8707 resource) has its own single flight, but all redeem the account's one refresh token;
/// taking turns means a rotated refresh token is stored (``CredentialStore``) before its access token is used, and
/// every other entry refreshes with whatever is stored then. Whatever else reads the item and writes it back (a
/// sign-in's result, a sign-out, the warning's date) takes the same turn, so it never crosses a rotation in flight.
///
/// The turn belongs to the item (``SecretKey``), not to the account's state: a reload that resets or removes the
/// account keeps it, so a refresh begun before it finishes its turn and the next one waits for it.
extension TokenBroker {
    struct CredentialTurn {
        var taken = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    /// Waits until nothing else is redeeming or rewriting the item's refresh token.
    func acquireRedemption(_ key: SecretKey) async {
        guard turns[key]?.taken == true else {
            turns[key] = CredentialTurn(taken: true)
            return
        }
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            turns[key]?.waiters.append(waiter)
        }
    }

    /// Hands the turn to the next waiter (it stays taken), or frees it.
    func releaseRedemption(_ key: SecretKey) {
        guard var turn = turns[key] else { return }
        guard !turn.waiters.isEmpty else {
            turns[key] = nil
            return
        }
        turn.waiters.removeFirst().resume()
        turns[key] = turn
    }
}
