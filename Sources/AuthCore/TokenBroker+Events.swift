/// The broker's event stream and its activity, for front ends that push and for the agent's lifecycle (status
/// line, idle exit). Events are published at the points where the state they describe changes (TokenBroker.swift).
extension TokenBroker {
    /// Events published from now on (see ``BrokerEvent``).
    public nonisolated func events() -> AsyncStream<BrokerEvent> { eventHub.subscribe() }

    /// True while any account has a refresh in flight or a sign-in pending: the agent must not exit idle then.
    public var isBusy: Bool { accounts.values.contains { !$0.refreshes.isEmpty || $0.signIn.isPending } }

    nonisolated func publish(_ event: BrokerEvent) { eventHub.publish(event) }

    /// ``BrokerEvent/signInWanted(_:by:caller:)``: a confined caller, `by`, named `caller`, needed `account`'s sign-in.
    public nonisolated func announceSignInWanted(_ account: String, by: String, caller: String) {
        publish(.signInWanted(account, by: by, caller: caller))
    }
}
