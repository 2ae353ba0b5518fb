#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging

/// Calls Cognito Identity's JSON 1.1 API over an ``HTTPTransport``, with the
/// standard retry mode. Every failure comes out as a ``FederationError``.
struct CognitoIdentityClient: Sendable {
    static let userAgent = "IdentityBroker/\(IdentityBrokerVersion.current) (Swift; Linux)"

    let endpoint: String
    /// Whether `endpoint` is plaintext to loopback, so that no proxy is used (``HTTPRequest/bypassesProxies``).
    let endpointIsLoopback: Bool
    let transport: any HTTPTransport
    let limits: HTTPLimits
    let retry: RetryRunner

    init(endpoint: String, transport: any HTTPTransport, limits: HTTPLimits, retry: RetryRunner) {
        self.endpoint = endpoint
        endpointIsLoopback = EndpointRule.isPlaintextLoopbackURL(endpoint)
        self.transport = transport
        self.limits = limits
        self.retry = retry
    }

    /// A client for `configuration`'s endpoint, limits and retry policy, with one
    /// retry quota of its own unless `retryRunner` brings one.
    init(
        configuration: FederationConfiguration,
        transport: any HTTPTransport,
        environment: [String: String],
        retryRunner: RetryRunner?
    ) throws(FederationError) {
        self.init(
            endpoint: try configuration.resolvedEndpoint(environment: environment),
            transport: transport,
            limits: HTTPLimits(
                connectTimeout: configuration.connectTimeout,
                requestTimeout: configuration.requestTimeout,
                maxResponseBytes: configuration.maxResponseBytes,
                certificateAuthorityFile: try configuration.resolvedCertificateAuthorityFile(environment: environment)
            ),
            retry: retryRunner ?? RetryRunner(policy: configuration.retry, quota: RetryQuota(policy: configuration.retry))
        )
    }

    /// `GetId`: the identity ID for `logins` (or a new guest identity without them).
    func getId(
        identityPoolId: String,
        accountId: String?,
        logins: [String: String]?,
        deadline: ContinuousClock.Instant,
        logger: Logger
    ) async throws(FederationError) -> String {
        let output: GetIdOutput = try await call(
            "GetId",
            GetIdInput(IdentityPoolId: identityPoolId, AccountId: accountId, Logins: logins),
            secrets: logins.map { Array($0.values) } ?? [],
            deadline: deadline,
            logger: logger
        )
        return output.IdentityId
    }

    /// `GetCredentialsForIdentity`: temporary credentials for `identityId`.
    func getCredentialsForIdentity(
        identityId: String,
        logins: [String: String]?,
        customRoleArn: String?,
        deadline: ContinuousClock.Instant,
        logger: Logger
    ) async throws(FederationError) -> FederationResult {
        let output: GetCredentialsForIdentityOutput = try await call(
            "GetCredentialsForIdentity",
            GetCredentialsForIdentityInput(IdentityId: identityId, Logins: logins, CustomRoleArn: customRoleArn),
            secrets: logins.map { Array($0.values) } ?? [],
            namesIdentity: true,
            deadline: deadline,
            logger: logger
        )
        let wire = output.Credentials
        return FederationResult(
            identityId: output.IdentityId ?? identityId,
            credentials: AWSCredentials(
                accessKeyId: wire.AccessKeyId,
                secretAccessKey: wire.SecretKey,
                sessionToken: wire.SessionToken,
                expiration: wire.Expiration.date
            )
        )
    }

    /// `GetOpenIdToken`: a Cognito OpenID token for `identityId`.
    func getOpenIdToken(
        identityId: String,
        logins: [String: String]?,
        deadline: ContinuousClock.Instant,
        logger: Logger
    ) async throws(FederationError) -> (identityId: String, token: String) {
        let output: GetOpenIdTokenOutput = try await call(
            "GetOpenIdToken",
            GetOpenIdTokenInput(IdentityId: identityId, Logins: logins),
            secrets: logins.map { Array($0.values) } ?? [],
            namesIdentity: true,
            deadline: deadline,
            logger: logger
        )
        return (output.IdentityId ?? identityId, output.Token)
    }

    /// `GetOpenIdTokenForDeveloperIdentity`, signed by `signer` (the backend's AWS
    /// credentials): an OpenID token for the developer user in `logins`, linked to
    /// `identityId` when given. The identity ID is the service's, else `identityId`;
    /// `nil` when neither is known.
    func getOpenIdTokenForDeveloperIdentity(
        identityPoolId: String,
        identityId: String?,
        logins: [String: String],
        tokenDuration: Duration?,
        signer: SigV4Signer,
        deadline: ContinuousClock.Instant,
        logger: Logger
    ) async throws(FederationError) -> (identityId: String?, token: String) {
        let output: GetOpenIdTokenOutput = try await call(
            "GetOpenIdTokenForDeveloperIdentity",
            GetOpenIdTokenForDeveloperIdentityInput(
                IdentityPoolId: identityPoolId,
                IdentityId: identityId,
                Logins: logins,
                TokenDuration: tokenDuration.map { Int($0.components.seconds) }
            ),
            // The signing secrets: an error must never echo them.
            secrets: [signer.credentials.secretAccessKey] + (signer.credentials.sessionToken.map { [$0] } ?? []),
            deadline: deadline,
            signer: signer,
            logger: logger
        )
        return (output.IdentityId ?? identityId, output.Token)
    }

    // MARK: - One operation, with retries

    /// Sends `operation` with `input` and decodes its output, retrying what the
    /// standard retry mode allows until `deadline`.
    ///
    /// - Parameter namesIdentity: whether the operation acts on an existing identity ID, so
    ///   its error can say that identity is gone.
    private func call<Input: CognitoRequestBody, Output: CognitoResponseBody>(
        _ operation: String,
        _ input: Input,
        secrets: [String],
        namesIdentity: Bool = false,
        deadline: ContinuousClock.Instant,
        signer: SigV4Signer? = nil,
        logger: Logger
    ) async throws(FederationError) -> Output {
        let body = input.jsonBody
        let headers: [(name: String, value: String)] = [
            ("Content-Type", "application/x-amz-json-1.1"),
            ("X-Amz-Target", "AWSCognitoIdentityService.\(operation)"),
            ("User-Agent", Self.userAgent),
            ("Accept", "application/json"),
        ]
        var request = HTTPRequest(method: "POST", url: endpoint, headers: headers, body: body, limits: limits)
        request.bypassesProxies = endpointIsLoopback
        return try await ServiceCaller(transport: transport, retry: retry).send(
            request, operation: operation, secrets: secrets, deadline: deadline, signer: signer, logger: logger,
            service: .cognitoIdentity,
            decodeError: { response in
                CognitoErrorDecoder.decode(response: response, operation: operation, namesIdentity: namesIdentity, redacting: secrets)
            },
            decodeOutput: { (body) throws(FederationError) -> Output in
                try CognitoResponseDecoder.decode(Output.self, from: body, operation: operation)
            }
        )
    }
}

extension Logger {
    /// What the library logs to when the caller passes no logger: nothing.
    static let disabled = Logger(label: "identity-broker.disabled", factory: { _ in SwiftLogNoOpLogHandler() })
}
