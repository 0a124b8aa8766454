/// Private-use URI scheme redirects (RFC 8252 §7.1): the desktop hands the redirect to `authctl callback URI`,
/// which sends it with `login_callback`; it is then judged like any other response (``submitRedirect``).
extension TokenBroker {
    /// The account whose private-use redirect URI `url` is addressed to (same scheme and path). Only the account is
    /// found here; the URL is judged in full by ``submitRedirect(account:url:)``. A grant's sign-in of its own has its
    /// account's redirect: of those that share it, the one signing in now, and of several signing in at once, the one
    /// whose sign-in the response answers (its state; judged, not consumed), since the desktop hands it over once.
    public func account(forCallback url: String) async throws(AuthError) -> String {
        let matches = accountOrder.filter { name in
            accounts[name]?.config.privateUseRedirect?.addresses(url) ?? false
        }
        let signingIn = matches.filter { accounts[$0]?.signIn.pending != nil }
        if signingIn.count > 1 {
            for name in signingIn {
                guard let flow = accounts[name]?.signIn.pending?.flow,
                      case .redirect(let begun)? = try? await flow.start.value else { continue }
                if case .rejected = begun.session.judge(pastedURL: url, redirectURI: begun.listener.redirectURI) { continue }
                return name
            }
        }
        guard let name = signingIn.first ?? matches.first else {
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
