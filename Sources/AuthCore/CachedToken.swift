/// An access token in the broker's cache (the default entry or a scoped one), never its refresh token.
struct CachedToken: Sendable {
    var tokens: TokenSet
    /// Spreads this entry's early-refresh moment over many accounts and agents (``RefreshPolicy/earlyMargin``).
    var jitter = 0.0
    /// Set after a resume from suspend (``TokenBroker/markStale(_:)``): not served until refreshed, except during an
    /// outage.
    var stale = false
}
