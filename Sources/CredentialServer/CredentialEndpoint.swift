/// Where a child process gets one session's credentials from a running
/// ``CredentialServer``, and the environment that tells the AWS SDKs so.
///
/// ```swift
/// let endpoint = try await server.endpoint(for: "alice")
/// let environment = endpoint.childEnvironment(from: ProcessInfo.processInfo.environment)
/// // start the child with `environment`
/// ```
///
/// ``childEnvironment(from:removing:)``, not a merge of ``environment`` into the parent's: it also
/// removes what the SDKs would use first (static keys, a profile, a web identity) and the
/// keystore's key variables, and keeps the SDKs from falling back to the instance's role.
///
/// `description` shows the URL, never the token.
public struct CredentialEndpoint: Sendable {
    /// The variable the AWS SDKs read the credential URL from.
    public static let fullURIVariable = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
    /// The variable the AWS SDKs read the `Authorization` header value from.
    public static let authorizationTokenVariable = "AWS_CONTAINER_AUTHORIZATION_TOKEN"
    /// Variables a child must not inherit, because the SDKs would use them before (or
    /// instead of) the endpoint:
    /// - static credentials, including the older spellings some SDKs still read
    ///   (`AWS_ACCESS_KEY`, `AWS_SECRET_KEY`, `AWS_SECURITY_TOKEN`);
    /// - a profile (`AWS_PROFILE`, and `AWS_DEFAULT_PROFILE`, which botocore and the AWS CLI
    ///   read the same way);
    /// - a web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN`: every SDK's chain
    ///   tries it before the container provider, so on a Kubernetes pod with a service-account
    ///   role the child would act as the pod);
    /// - another container endpoint or token file;
    /// - botocore's legacy credential files (`AWS_CREDENTIAL_FILE`, and `BOTO_CONFIG`, boto 2's
    ///   configuration), which its chain reads before the container provider.
    ///
    /// A `[default]` profile in the shared credentials or config file (static keys,
    /// `credential_process`, SSO, a role to assume) also comes before the container provider
    /// in the SDKs' chains; it is a file, not a variable, so it is not removed here.
    public static let conflictingVariables: [String] = [
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_CREDENTIAL_EXPIRATION",
        "AWS_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SECURITY_TOKEN",
        "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        "AWS_CREDENTIAL_FILE", "BOTO_CONFIG",
    ]

    /// Variables that open a keystore, under the names this library and the `federate` CLI
    /// read them: `IDENTITY_BROKER_KEY` (``KeySource/environment(variable:)``'s default),
    /// `IDENTITY_BROKER_PASSPHRASE` and `IDENTITY_BROKER_KEY_FILE` (the CLI's), and the
    /// CLI's keys that only open during a key rotation (`IDENTITY_BROKER_OTHER_KEY`,
    /// `IDENTITY_BROKER_OTHER_PASSPHRASE`, `IDENTITY_BROKER_OTHER_KEY_FILE`). A child gets
    /// one session through the endpoint, never what opens every session in the store; a key
    /// in a variable of your own naming is yours to remove.
    public static let keystoreVariables: [String] = [
        "IDENTITY_BROKER_KEY", "IDENTITY_BROKER_PASSPHRASE", "IDENTITY_BROKER_KEY_FILE",
        "IDENTITY_BROKER_OTHER_KEY", "IDENTITY_BROKER_OTHER_PASSPHRASE", "IDENTITY_BROKER_OTHER_KEY_FILE",
    ]

    /// The variable the `federate` CLI reads its keystore's location from. A child loses it
    /// when it holds a URL (`postgres://user:password@…` carries the database password); a
    /// directory is no secret, and is left.
    public static let keystoreLocationVariable = "IDENTITY_BROKER_KEYSTORE"

    /// Whether a child is denied the variable `name` holding `value`: one of
    /// ``conflictingVariables`` or ``keystoreVariables``, or ``keystoreLocationVariable``
    /// holding a URL. The one rule for ``childEnvironment(from:removing:)`` and `federate
    /// exec`, which works on the bytes of `environ`.
    package static func withholds(_ name: some Collection<UInt8>, value: some Collection<UInt8>) -> Bool {
        let name = String(decoding: name, as: UTF8.self)
        if conflictingVariables.contains(name) || keystoreVariables.contains(name) { return true }
        guard name == keystoreLocationVariable else { return false }
        let separator = Array("://".utf8)
        let value = Array(value)
        return value.indices.contains { value[$0...].starts(with: separator) }
    }

    /// The variable that keeps the SDKs away from the EC2 instance metadata service.
    ///
    /// Some SDKs' default chains (Java's, .NET's) go on to the instance metadata service when
    /// the container endpoint answers no credentials: a first fetch after the session expired
    /// or was cleared would then get the EC2 instance's role, and the child would act as the
    /// machine instead of failing. ``childEnvironment(from:removing:)`` sets it to `true` unless the
    /// base environment sets it to something (an empty value counts as unset). The SDKs also find their region there when none is
    /// configured: set `AWS_REGION` for a child on EC2.
    public static let instanceMetadataDisabledVariable = "AWS_EC2_METADATA_DISABLED"

    /// The value a child gets for ``instanceMetadataDisabledVariable`` when it inherits
    /// `inherited`: what the caller chose, or `true` when the variable is unset or empty (an
    /// empty value is unset to some SDKs, Go's).
    public static func instanceMetadataSetting(inherited: String?) -> String {
        guard let inherited, !inherited.isEmpty else { return "true" }
        return inherited
    }

    /// The session served here.
    public let session: String
    /// The full URL, e.g. `http://127.0.0.1:43127/credentials/alice`.
    public let url: String
    /// The token every request must present.
    public let authorizationToken: CredentialServerToken

    /// Creates an endpoint description.
    public init(session: String, url: String, authorizationToken: CredentialServerToken) {
        self.session = session
        self.url = url
        self.authorizationToken = authorizationToken
    }

    /// The two variables to set in a child's environment: ``fullURIVariable`` (``url``)
    /// and ``authorizationTokenVariable`` (the token's value, in the clear: hand it to the
    /// child only, never to a log). Remove ``conflictingVariables`` from it too.
    public var environment: [String: String] {
        [Self.fullURIVariable: url, Self.authorizationTokenVariable: authorizationToken.value]
    }

    /// `environment`-style pairs applied to `base`: ``conflictingVariables``,
    /// ``keystoreVariables``, ``keystoreLocationVariable`` when it holds a URL, and the names
    /// in `removing` left out; the two variables set; and
    /// ``instanceMetadataDisabledVariable`` set to `true` unless `base` sets it.
    ///
    /// - Parameter removing: variables of your own that open the keystore or reach its
    ///   database, such as the name given to SecureStorage's `KeySource.environment(variable:)`.
    public func childEnvironment(from base: [String: String], removing: some Sequence<String> = [String]()) -> [String: String] {
        var result = base.filter { !Self.withholds(Array($0.key.utf8), value: Array($0.value.utf8)) }
        for name in removing { result[name] = nil }
        result.merge(environment) { _, new in new }
        result[Self.instanceMetadataDisabledVariable] = Self.instanceMetadataSetting(inherited: result[Self.instanceMetadataDisabledVariable])
        return result
    }
}

extension CredentialEndpoint: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The session and URL; the token is redacted.
    public var description: String {
        "CredentialEndpoint(session: \(session), url: \(url), authorizationToken: <redacted>)"
    }

    /// The same as ``description``.
    public var debugDescription: String { description }

    /// The session and URL only, so `dump` shows no token whatever the token's own type does.
    public var customMirror: Mirror {
        Mirror(self, children: ["session": session, "url": url, "authorizationToken": "<redacted>"], displayStyle: .struct)
    }
}
