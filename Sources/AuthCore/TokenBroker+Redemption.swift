/// One refresh-token redemption at a time per account. Every entry (the default token and each scope subset or
/// RFC 8707 resource) has its own single flight, but all redeem the account's one refresh token; taking turns means a
/// rotated refresh token is in the keyring before its access token is used, and every other entry refreshes with
/// whatever is stored then.
extension TokenBroker {
    /// Waits until no other refresh of the account is redeeming its refresh token.
    func acquireRedemption(_ name: String) async {
        guard accounts[name]?.redeeming == true else {
            accounts[name]?.redeeming = true
            return
        }
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            accounts[name]?.redeemWaiters.append(waiter)
        }
    }

    /// Hands the redemption to the next waiter (it stays taken), or frees it.
    func releaseRedemption(_ name: String) {
        if let waiters = accounts[name]?.redeemWaiters, !waiters.isEmpty {
            let next = accounts[name]!.redeemWaiters.removeFirst()
            next.resume()
        } else {
            accounts[name]?.redeeming = false
        }
    }
}
