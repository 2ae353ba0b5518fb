#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif
import SecureStorage

/// Temporary AWS credentials for one Cognito identity.
///
/// `description`, `debugDescription` and string interpolation show only the
/// access key ID and the expiration: the secret key and session token are
/// redacted so that a stray `print` or log line never leaks them.
///
/// `Codable` is for handing the credentials on deliberately (a file only their user reads,
/// a response to a caller entitled to them): encoding writes the secret key and session
/// token in the clear, so never pass them to a generic encoder such as a structured-log
/// handler or a debugging endpoint.
public struct AWSCredentials: Sendable, Hashable, Codable {
    /// The access key ID (`ASIA…`); not secret on its own.
    public var accessKeyId: String
    /// The secret access key. Never printed.
    public var secretAccessKey: String
    /// The session token. Never printed.
    public var sessionToken: String
    /// When the service stops honouring these credentials.
    public var expiration: Date

    /// Creates credentials from their parts.
    public init(accessKeyId: String, secretAccessKey: String, sessionToken: String, expiration: Date) {
        self.accessKeyId = accessKeyId
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
        self.expiration = expiration
    }

    /// Whether the credentials are past `expiration - margin` at `now`.
    public func isExpired(at now: Date = Date(), margin: Duration = FederationConfiguration.defaultExpiryMargin) -> Bool {
        now.timeIntervalSince1970 >= expiration.timeIntervalSince1970 - margin.timeInterval
    }
}

extension AWSCredentials: CustomStringConvertible, CustomDebugStringConvertible {
    /// A redacted summary: access key ID and expiration only.
    public var description: String {
        "AWSCredentials(accessKeyId: \(accessKeyId), secretAccessKey: <redacted>, sessionToken: <redacted>, expiration: \(expiration.formatted(.iso8601)))"
    }

    /// The same redacted summary as ``description``.
    public var debugDescription: String { description }
}

extension AWSCredentials: CustomReflectable {
    /// Keeps `dump` and debugger views from showing the secrets.
    public var customMirror: Mirror {
        Mirror(self, children: ["accessKeyId": accessKeyId, "expiration": expiration], displayStyle: .struct)
    }
}
