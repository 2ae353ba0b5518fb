#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import SecureStorage

/// Calls STS's `AssumeRoleWithWebIdentity` through the AWS Query protocol (a
/// form-encoded, unsigned `POST /`, answered in XML), over the same transport, retry
/// quota and deadline as the Cognito client.
struct STSClient: Sendable {
    static let operation = "AssumeRoleWithWebIdentity"

    let endpoint: String
    /// Whether `endpoint` is plaintext to loopback, so that no proxy is used (``HTTPRequest/bypassesProxies``).
    let endpointIsLoopback: Bool
    let caller: ServiceCaller
    let limits: HTTPLimits

    init(endpoint: String, transport: any HTTPTransport, limits: HTTPLimits, retry: RetryRunner) {
        self.endpoint = endpoint
        endpointIsLoopback = EndpointRule.isPlaintextLoopbackURL(endpoint)
        self.caller = ServiceCaller(transport: transport, retry: retry)
        self.limits = limits
    }

    /// The request body for `options`, `roleSessionName` and `webIdentityToken`.
    static func query(options: ClassicFlowOptions, roleSessionName: String, webIdentityToken: String) -> STSQuery {
        var query = STSQuery(action: operation)
        query.append("RoleArn", options.roleArn)
        query.append("RoleSessionName", roleSessionName)
        query.append("WebIdentityToken", webIdentityToken)
        query.append("DurationSeconds", options.durationSeconds.map(String.init))
        query.append("Policy", options.sessionPolicy)
        for (index, arn) in options.managedPolicyArns.enumerated() {
            query.append("PolicyArns.member.\(index + 1).arn", arn)
        }
        return query
    }

    /// `AssumeRoleWithWebIdentity` with the Cognito OpenID token `webIdentityToken`.
    ///
    /// - Parameter secrets: every secret of the federation (the provider token and the
    ///   OpenID token): scrubbed from anything an error carries.
    func assumeRoleWithWebIdentity(
        options: ClassicFlowOptions,
        roleSessionName: String,
        webIdentityToken: String,
        secrets: [String],
        deadline: ContinuousClock.Instant,
        logger: Logger
    ) async throws(FederationError) -> AssumedRoleOutput {
        let body = Self.query(options: options, roleSessionName: roleSessionName, webIdentityToken: webIdentityToken).body
        let headers: [(name: String, value: String)] = [
            ("Content-Type", "application/x-www-form-urlencoded; charset=utf-8"),
            ("User-Agent", CognitoIdentityClient.userAgent),
            ("Accept", "text/xml"),
        ]
        var request = HTTPRequest(method: "POST", url: endpoint, headers: headers, body: body, limits: limits)
        request.bypassesProxies = endpointIsLoopback
        let operation = Self.operation
        let redactor = SecretRedactor(secrets: secrets)
        return try await caller.send(
            request, operation: operation, secrets: secrets, deadline: deadline, logger: logger,
            service: .sts,
            decodeError: { response in STSErrorDecoder.decode(response: response, operation: operation, redacting: secrets) },
            decodeOutput: { (body) throws(FederationError) -> AssumedRoleOutput in
                try STSResponseDecoder.assumedRole(from: body, redactor: redactor)
            }
        )
    }
}
