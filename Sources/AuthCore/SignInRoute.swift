/// Which flow a new sign-in runs, decided once the provider's metadata says whether it offers the device grant
/// (RFC 8628). Pure, so the choice is tested without a server (SignInCoordinatorTests); TokenBroker+Device.swift
/// acts on it.
enum SignInRoute: Equatable, Sendable {
    /// Open the way back (loopback listener, paste or private-use scheme) and start the browser. With
    /// `deviceFallback`, a browser that cannot be started gives way to a device code (a person who sees no browser
    /// can still use a phone); the way back is closed first.
    case redirect(deviceFallback: Bool)
    /// Ask for a device code and poll the token endpoint.
    case device
    /// The device grant was asked for and the server does not offer it.
    case deviceUnsupported

    static func choose(_ method: LoginMethod, offersDevice: Bool, openBrowser: Bool) -> SignInRoute {
        switch method {
        case .device: return offersDevice ? .device : .deviceUnsupported
        case .preferDevice where offersDevice: return .device
        case .preferDevice, .redirect: return .redirect(deviceFallback: openBrowser && offersDevice)
        }
    }
}
