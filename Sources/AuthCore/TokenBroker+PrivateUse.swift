/// Private-use URI scheme redirects (RFC 8252 §7.1): the desktop hands the redirect to `authctl callback URI`,
/// which sends it with `login_callback`; it is then judged like any other response (``submitRedirect``).
extension TokenBroker {
    /// The account whose private-use redirect URI `url` is addressed to (same scheme and path). Only the account is
    /// found here; the URL is judged in full by ``submitRedirect(account:url:)``. A grant's sign-in of its own has its
    /// account's redirect: of two that share it, the one signing in now.
    public func account(forCallback url: String) throws(AuthError) -> String {
        let matches = accountOrder.filter { name in
            accounts[name]?.config.privateUseRedirect?.addresses(url) ?? false
        }
        guard let name = matches.first(where: { accounts[$0]?.signIn.pending != nil }) ?? matches.first else {
            throw AuthError(.loginFailed,
                "no account uses this redirect URI (check 'redirect_uri' in config.toml and the registered scheme handler)")
        }
        return name
    }
}

/// Stands in for the loopback listener when the account uses a private-use scheme: there is nothing to open or close.
struct PrivateUseReceiver: RedirectListener {
    let redirectURI: String
    func close() async {}
}
