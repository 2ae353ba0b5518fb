/// What `GetOpenIdTokenForDeveloperIdentity` gives a backend for one of its users:
/// hand both to the client, which federates with ``AuthProvider/developer`` and
/// ``FederationOptions/developerProvidedIdentityId``.
public struct DeveloperToken: Sendable, Hashable {
    /// The Cognito identity ID the user is linked to.
    public var identityId: String
    /// The OpenID token. Secret: never printed.
    public var token: String

    /// Creates a developer token.
    public init(identityId: String, token: String) {
        self.identityId = identityId
        self.token = token
    }
}

extension DeveloperToken: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The identity ID only.
    public var description: String { "DeveloperToken(identityId: \(identityId), token: <redacted>)" }
    /// The same as ``description``.
    public var debugDescription: String { description }
    /// Keeps `dump` from showing the token.
    public var customMirror: Mirror { Mirror(self, children: ["identityId": identityId], displayStyle: .struct) }
}
