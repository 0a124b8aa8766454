import FoundationEssentials

extension TokenBroker {
    /// What ``reconfigure(_:)`` changed, by account name.
    public struct Reconfiguration: Sendable, Equatable {
        public var added: [String] = []
        public var removed: [String] = []
        /// Accounts whose settings changed; those in ``reset`` too lost their cached tokens.
        public var changed: [String] = []
        /// Accounts whose token settings changed: they start again from the sign-in in the keyring.
        public var reset: [String] = []
    }

    /// Puts a new set of accounts in force without a restart (`authctl reload`, SIGHUP, or a configuration file
    /// fixed after an error), keeping what is still valid:
    /// - an unchanged account keeps everything;
    /// - one whose access policy, git hosts or sign-in time limit changed keeps its tokens (none of those is part
    ///   of what the tokens were issued for);
    /// - one whose token settings changed (issuer, client, secret, scopes, endpoints, redirect) drops its cached
    ///   tokens, metadata and ID-token claims and starts again from its refresh token in the keyring;
    /// - a removed account is forgotten in memory only: its refresh token stays in the keyring, so adding the account
    ///   back restores the sign-in.
    /// A refresh already under way for a removed or reset account is not cancelled (cancelling it could lose a
    /// refresh token the server has just rotated): it completes, and what it stores in the keyring stays, but its
    /// result no longer reaches the account's state (``performRefresh(_:entry:)``); the account's next refresh waits
    /// for it (the keyring item's turn, TokenBroker+Redemption.swift). A pending sign-in of such an account is
    /// cancelled: it was asked for under the old settings, and the user signs in again under the new ones.
    @discardableResult
    public func reconfigure(_ configs: [AccountConfig]) -> Reconfiguration {
        // The grants' sign-ins of their own follow their account's settings, and go (in memory) with it.
        let configs = configs + grantSignIns.values.sorted { $0.name < $1.name }.compactMap { signIn in
            configs.first { $0.name == signIn.account }.map(signIn.config(from:))
        }
        var outcome = Reconfiguration()
        let newNames = Set(configs.map(\.name))
        for name in accountOrder where !newNames.contains(name) {
            accounts[name]?.signIn.pending?.flow.completion.cancel()
            accounts[name] = nil
            providers.forget(name)
            outcome.removed.append(name)
        }
        for config in configs {
            guard let old = accounts[config.name]?.config else {
                accounts[config.name] = AccountState(config: config, policy: policy, loginLimit: loginLimit)
                outcome.added.append(config.name)
                continue
            }
            guard old != config else { continue }
            outcome.changed.append(config.name)
            if TokenBroker.sameTokenSettings(old, config) {
                accounts[config.name]?.config = config
            } else {
                // A new state rather than a cleared one: the in-flight tasks of the old one (see above) must not be
                // joined by new callers, whose tokens would come from the old settings.
                accounts[config.name]?.signIn.pending?.flow.completion.cancel()
                accounts[config.name] = AccountState(config: config, policy: policy, loginLimit: loginLimit)
                outcome.reset.append(config.name)
            }
        }
        accountOrder = configs.map(\.name)
        for name in outcome.added + outcome.removed + outcome.changed { publish(.accountChanged(name)) }
        publish(.configurationChanged)
        proactiveBell.ring()
        lifetimeBell.ring()
        return outcome
    }

    /// Tells the front ends' subscribers (the status line) that the configuration in force, or its problem, changed.
    public nonisolated func announceConfigurationChange() { publish(.configurationChanged) }

    /// True when the two differ only in settings that do not shape the tokens: who may get them (`allowed_clients`,
    /// `confirm`), which git hosts use the account, and how long a sign-in may take.
    static func sameTokenSettings(_ old: AccountConfig, _ new: AccountConfig) -> Bool {
        var old = old
        old.access = new.access
        old.gitHosts = new.gitHosts
        old.loginTimeout = new.loginTimeout
        old.signInLifetime = new.signInLifetime
        old.signInWarning = new.signInWarning
        return old == new
    }
}
