/// Long-lived or temporary AWS credentials a backend signs requests with, e.g.
/// for ``DeveloperIdentityIssuer``. Not the end user's credentials.
///
/// `description` shows only the access key ID.
public struct SigningCredentials: Sendable, Hashable {
    /// The access key ID.
    public var accessKeyId: String
    /// The secret access key. Never printed.
    public var secretAccessKey: String
    /// The session token of temporary credentials, if any. Never printed.
    public var sessionToken: String?

    /// Creates signing credentials.
    public init(accessKeyId: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyId = accessKeyId
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }

    /// Reads `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`
    /// from `environment`; `nil` when either of the first two is missing.
    public static func fromEnvironment(_ environment: [String: String]) -> SigningCredentials? {
        guard let id = environment["AWS_ACCESS_KEY_ID"], !id.isEmpty,
            let secret = environment["AWS_SECRET_ACCESS_KEY"], !secret.isEmpty
        else { return nil }
        let token = environment["AWS_SESSION_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        return SigningCredentials(accessKeyId: id, secretAccessKey: secret, sessionToken: token)
    }
}

extension SigningCredentials: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The access key ID only.
    public var description: String {
        "SigningCredentials(accessKeyId: \(accessKeyId), secretAccessKey: <redacted>, sessionToken: \(sessionToken == nil ? "nil" : "<redacted>"))"
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// Keeps `dump` from showing the secrets.
    public var customMirror: Mirror { Mirror(self, children: ["accessKeyId": accessKeyId], displayStyle: .struct) }
}
