#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// How a ``FederationClient`` reaches Cognito Identity. A value type with
/// documented defaults; only the identity pool ID is required.
///
/// ```swift
/// var configuration = FederationConfiguration(identityPoolId: "us-east-1:1a2b…")
/// configuration.expiryMargin = .seconds(60)
/// ```
public struct FederationConfiguration: Sendable, Hashable {
    /// The identity pool, `REGION:GUID`.
    public var identityPoolId: String
    /// The AWS account ID sent with `GetId`; optional for most pools. Default `nil`.
    public var accountId: String?
    /// The region; `nil` (the default) reads it from the pool ID's prefix.
    public var region: String?
    /// An explicit endpoint, e.g. `http://127.0.0.1:5000/`. When `nil` (the default)
    /// the environment's `AWS_ENDPOINT_URL_COGNITO_IDENTITY`, then `AWS_ENDPOINT_URL`,
    /// then `https://cognito-identity.{region}.amazonaws.com/` apply. An empty string is
    /// refused (``FederationError/Code/invalidConfiguration``) rather than read as `nil`: an
    /// unset variable passed on must not send tokens to AWS instead of the endpoint meant.
    public var endpoint: String?
    /// An explicit STS endpoint for the classic flow (``FederationFlow/classic(_:)``), e.g.
    /// `http://127.0.0.1:5000/`. When `nil` (the default) the environment's
    /// `AWS_ENDPOINT_URL_STS`, then `AWS_ENDPOINT_URL`, then
    /// `https://sts.{region}.amazonaws.com/` apply. The same endpoint rule as ``endpoint``
    /// holds, checked when the client is created, as ``endpoint`` is (the environment's
    /// variables only when the classic flow runs).
    public var stsEndpoint: String?
    /// Credentials count as expired this long before their expiration. Default ``defaultExpiryMargin`` (120 s); zero or
    /// more (a negative margin makes the client initializer throw `invalidConfiguration`).
    public var expiryMargin: Duration
    /// Time allowed to connect (TCP and TLS) in one attempt. Default 10 s; more than zero
    /// (else the client initializer throws `invalidConfiguration`), as are the other two.
    public var connectTimeout: Duration
    /// Time allowed for one attempt, connect included. Default 30 s.
    public var requestTimeout: Duration
    /// Bound on one whole federation, retries and backoff included. Default 60 s.
    public var federationTimeout: Duration
    /// The largest response body accepted. Default 1 MiB; more than zero.
    public var maxResponseBytes: Int
    /// How transient failures and throttling are retried. Default ``RetryPolicy/standard``.
    public var retry: RetryPolicy
    /// How long before a session would read expired its renewal reminder
    /// (``SessionEvent/Kind/renewalDue(expiresAt:)``) comes. Default 5 minutes; zero turns
    /// reminders off (a negative lead time makes the client initializer throw
    /// `invalidConfiguration`).
    public var renewalLeadTime: Duration
    /// After ``FederationClient/postponeRenewalReminder(for:)``, the least time before the
    /// next reminder. Default 10 minutes; more than zero (else the client initializer throws
    /// `invalidConfiguration`: a handler that always postpones would be reminded at once,
    /// again and again).
    public var renewalPostponement: Duration
    /// How many sessions a ``FederationClient`` keeps in memory; the least recently used
    /// beyond that are read from the keystore again when next used (sessions being
    /// federated or observed are always kept, and with many observed the cache goes over its
    /// capacity by about one other session per 16 of them). Default ``defaultSessionCacheCapacity``.
    public var sessionCacheCapacity: Int
    /// Lets ``endpoint`` (or an `AWS_ENDPOINT_URL*` variable) be plaintext `http://` to a
    /// host that is not loopback. Default `false`: provider tokens then only travel over
    /// https, or over http to 127.0.0.0/8, `::1` and `localhost`. Set it only for a local
    /// emulator reached through a container network.
    public var allowInsecureEndpoint: Bool
    /// A PEM file of the certificate authorities to trust for HTTPS (Cognito and STS), in
    /// place of the system's: for a proxy that inspects TLS, or an endpoint with a private
    /// authority. When `nil` (the default) the environment's `AWS_CA_BUNDLE` applies, as in
    /// the AWS CLI, boto3 and several SDKs, then the system's bundle. Certificates are always verified; a
    /// file that cannot be read makes the client initializer throw `invalidConfiguration`.
    public var certificateAuthorityFile: String?

    /// Creates a configuration with the documented defaults.
    public init(
        identityPoolId: String,
        accountId: String? = nil,
        region: String? = nil,
        endpoint: String? = nil,
        stsEndpoint: String? = nil,
        expiryMargin: Duration = FederationConfiguration.defaultExpiryMargin,
        connectTimeout: Duration = .seconds(10),
        requestTimeout: Duration = .seconds(30),
        federationTimeout: Duration = .seconds(60),
        maxResponseBytes: Int = 1 << 20,
        retry: RetryPolicy = .standard,
        sessionCacheCapacity: Int = FederationConfiguration.defaultSessionCacheCapacity,
        renewalLeadTime: Duration = FederationConfiguration.defaultRenewalLeadTime,
        renewalPostponement: Duration = FederationConfiguration.defaultRenewalPostponement,
        allowInsecureEndpoint: Bool = false,
        certificateAuthorityFile: String? = nil
    ) {
        self.identityPoolId = identityPoolId
        self.accountId = accountId
        self.region = region
        self.endpoint = endpoint
        self.stsEndpoint = stsEndpoint
        self.expiryMargin = expiryMargin
        self.connectTimeout = connectTimeout
        self.requestTimeout = requestTimeout
        self.federationTimeout = federationTimeout
        self.maxResponseBytes = maxResponseBytes
        self.retry = retry
        self.sessionCacheCapacity = sessionCacheCapacity
        self.renewalLeadTime = renewalLeadTime
        self.renewalPostponement = renewalPostponement
        self.allowInsecureEndpoint = allowInsecureEndpoint
        self.certificateAuthorityFile = certificateAuthorityFile
    }

    /// The default ``expiryMargin``: 2 minutes, time enough for a call made with the
    /// credentials to reach AWS before they expire.
    public static let defaultExpiryMargin: Duration = .seconds(120)
    /// The default ``sessionCacheCapacity``: 10,000 sessions (a few MB).
    public static let defaultSessionCacheCapacity = 10_000
    /// The default ``renewalLeadTime``: 5 minutes.
    public static let defaultRenewalLeadTime: Duration = .seconds(300)
    /// The default ``renewalPostponement``: 10 minutes.
    public static let defaultRenewalPostponement: Duration = .seconds(600)
}

extension FederationConfiguration {
    /// What a federating client's initializer refuses, checked without a client: durations it
    /// cannot use (``checkDurations()``), a pool ID or region it cannot use, an unusable
    /// Cognito endpoint. The CLI
    /// asks this before it opens a keystore, which a first open creates.
    package func check(environment: [String: String]) throws(FederationError) {
        try checkDurations()
        _ = try resolvedEndpoint(environment: environment)
        // An explicit STS endpoint is checked with the rest; the environment's variables
        // only by the classic flow that uses them (they may be meant for other tools).
        if stsEndpoint != nil { _ = try resolvedSTSEndpoint(environment: environment) }
        _ = try resolvedCertificateAuthorityFile(environment: environment)
    }

    /// The largest certificate authority file read (the system's bundle is ~200 KB).
    static let largestCertificateAuthorityFile = 16 << 20

    /// The certificate authorities HTTPS trusts: ``certificateAuthorityFile``, else
    /// `AWS_CA_BUNDLE`, else `nil` (the system's). A file that cannot be read, or holds no
    /// PEM certificate, is refused here rather than failing every request as a TLS error.
    func resolvedCertificateAuthorityFile(environment: [String: String]) throws(FederationError) -> String? {
        let source: String
        let path: String
        if let configured = certificateAuthorityFile {
            (source, path) = ("the configured certificate authority file", configured)
        } else if let variable = environment["AWS_CA_BUNDLE"], !variable.isEmpty {
            (source, path) = ("AWS_CA_BUNDLE", variable)
        } else {
            return nil
        }
        // A regular file (after links) of a bounded size: a FIFO there would hold the
        // client's creation for as long as nobody writes to it.
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size <= Self.largestCertificateAuthorityFile,
              let contents = FileManager.default.contents(atPath: path)
        else {
            throw FederationError(
                code: .invalidConfiguration,
                message: "\(source) '\(path)' is not a readable file of at most 16 MiB; it must be a PEM file of certificate authorities")
        }
        guard String(decoding: contents, as: UTF8.self).contains("-----BEGIN CERTIFICATE-----") else {
            throw FederationError(
                code: .invalidConfiguration, message: "\(source) '\(path)' holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        }
        return path
    }

    /// Refuses durations and limits no client can work with: a negative expiry margin or
    /// renewal lead time; a renewal postponement, a timeout or a response size cap of zero or
    /// less (each would fail every call, where in curl or URLSession zero means "none").
    func checkDurations() throws(FederationError) {
        for (name, timeout) in [("connect timeout", connectTimeout), ("request timeout", requestTimeout), ("federation timeout", federationTimeout)]
        where timeout <= .zero {
            throw FederationError(
                code: .invalidConfiguration, message: "the \(name) is not positive: every call would time out at once; there is no unlimited setting")
        }
        guard maxResponseBytes > 0 else {
            throw FederationError(
                code: .invalidConfiguration, message: "the largest response body accepted is not positive: every answer would be refused")
        }
        guard expiryMargin >= .zero else {
            throw FederationError(
                code: .invalidConfiguration,
                message: "the expiry margin is negative: credentials would read as valid after they expired; use zero or more")
        }
        guard renewalLeadTime >= .zero else {
            throw FederationError(
                code: .invalidConfiguration, message: "the renewal lead time is negative; use zero (no reminders) or more")
        }
        guard renewalPostponement > .zero else {
            throw FederationError(
                code: .invalidConfiguration,
                message: "the renewal postponement is not positive: a postponed reminder would come again at once")
        }
    }

    /// The region from ``region`` or the pool ID's prefix. The pool ID's shape is checked
    /// either way: a mistyped one (or a token pasted in its place) would otherwise go to the
    /// service, with the token, and come back as a rejection.
    func resolvedRegion() throws(FederationError) -> String {
        try checkPoolIdShape()
        if let region {
            guard Self.isPlausibleRegion(region) else {
                throw FederationError(code: .invalidConfiguration, message: "region '\(region)' is not a region name like us-east-1")
            }
            return region
        }
        guard let colon = identityPoolId.firstIndex(of: ":") else {
            throw FederationError(
                code: .invalidConfiguration,
                message: "identity pool ID '\(identityPoolId)' is not of the form REGION:GUID; pass the full ID from the Cognito console"
            )
        }
        let prefix = String(identityPoolId[..<colon])
        guard Self.isPlausibleRegion(prefix), identityPoolId.index(after: colon) < identityPoolId.endIndex else {
            throw FederationError(
                code: .invalidConfiguration,
                message: "identity pool ID '\(identityPoolId)' does not start with a region in lowercase, like us-east-1; pass the full ID or set the region"
            )
        }
        return prefix
    }

    /// Cognito's pattern for a pool ID, `[\w-]+:[0-9a-f-]+` (at most 55 characters): the
    /// region, a colon, the lowercase GUID.
    private func checkPoolIdShape() throws(FederationError) {
        let bytes = Array(identityPoolId.utf8)
        let shape = "is not of the form REGION:GUID (lowercase, as the Cognito console shows it)"
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0, colon < bytes.count - 1, bytes.count <= 55 else {
            throw FederationError(code: .invalidConfiguration, message: "the identity pool ID \(shape); pass the full ID from the Cognito console")
        }
        let word = { (byte: UInt8) in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
        }
        let guid = { (byte: UInt8) in
            (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte) || byte == UInt8(ascii: "-")
        }
        guard bytes[..<colon].allSatisfy(word), bytes[(colon + 1)...].allSatisfy(guid) else {
            throw FederationError(code: .invalidConfiguration, message: "the identity pool ID \(shape); pass the full ID from the Cognito console")
        }
    }

    /// The endpoint by precedence: explicit, `AWS_ENDPOINT_URL_COGNITO_IDENTITY`, `AWS_ENDPOINT_URL`, then AWS's.
    func resolvedEndpoint(environment: [String: String]) throws(FederationError) -> String {
        try resolvedEndpoint(
            ("the configured endpoint", endpoint), serviceVariable: "AWS_ENDPOINT_URL_COGNITO_IDENTITY", host: "cognito-identity",
            environment: environment)
    }

    /// The STS endpoint by precedence: explicit, `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`, then AWS's regional one.
    func resolvedSTSEndpoint(environment: [String: String]) throws(FederationError) -> String {
        try resolvedEndpoint(("the configured STS endpoint", stsEndpoint), serviceVariable: "AWS_ENDPOINT_URL_STS", host: "sts", environment: environment)
    }

    /// The first of `configured`, the service's variable and `AWS_ENDPOINT_URL` that is set
    /// (each checked by ``EndpointRule``), else AWS's regional `https://<host>.<region>.amazonaws.com/`.
    private func resolvedEndpoint(
        _ configured: (source: String, value: String?), serviceVariable: String, host: String, environment: [String: String]
    ) throws(FederationError) -> String {
        // The pool ID's shape is checked even when an override makes the region moot,
        // so a typo fails at start-up rather than as a service error later.
        let region = try resolvedRegion()
        // An empty variable means unset (as AWS's tools read it); an empty configured value
        // is a mistake (an unset variable passed on) that must not fall back to AWS's own.
        if let value = configured.value, value.isEmpty {
            throw FederationError(
                code: .invalidConfiguration,
                message: "\(configured.source) is empty; leave it out to use \(serviceVariable), else AWS_ENDPOINT_URL, else AWS's own")
        }
        let candidates: [(String, String?)] = [
            configured,
            (serviceVariable, environment[serviceVariable]),
            ("AWS_ENDPOINT_URL", environment["AWS_ENDPOINT_URL"]),
        ]
        for (source, value) in candidates {
            guard let value, !value.isEmpty else { continue }
            return try EndpointRule.check(value, source: source, allowInsecure: allowInsecureEndpoint)
        }
        let suffix = region.hasPrefix("cn-") ? "amazonaws.com.cn" : "amazonaws.com"
        return "https://\(host).\(region).\(suffix)/"
    }

    private static func isPlausibleRegion(_ text: String) -> Bool {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 3, let last = parts.last, !last.isEmpty, last.allSatisfy(\.isNumber) else { return false }
        return parts.dropLast().allSatisfy { part in
            !part.isEmpty && part.allSatisfy { $0.isASCII && ($0.isLowercase || $0.isNumber) }
        }
    }
}
