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
    let transport: any HTTPTransport
    let limits: HTTPLimits
    let retry: RetryRunner

    init(endpoint: String, transport: any HTTPTransport, limits: HTTPLimits, retry: RetryRunner) {
        self.endpoint = endpoint
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
                maxResponseBytes: configuration.maxResponseBytes
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
            deadline: deadline,
            logger: logger
        )
        return (output.IdentityId ?? identityId, output.Token)
    }

    // MARK: - One operation, with retries

    /// Sends `operation` with `input` and decodes its output, retrying what the
    /// standard retry mode allows until `deadline`.
    func call<Input: Encodable & Sendable, Output: Decodable & Sendable>(
        _ operation: String,
        _ input: Input,
        secrets: [String],
        deadline: ContinuousClock.Instant,
        signer: SigV4Signer? = nil,
        logger: Logger
    ) async throws(FederationError) -> Output {
        let body: [UInt8]
        do {
            body = Array(try JSONCoders.encoder.encode(input))
        } catch {
            throw FederationError(code: .invalidConfiguration, message: "could not encode the \(operation) request", operation: operation)
        }
        let headers: [(name: String, value: String)] = [
            ("Content-Type", "application/x-amz-json-1.1"),
            ("X-Amz-Target", "AWSCognitoIdentityService.\(operation)"),
            ("User-Agent", Self.userAgent),
            ("Accept", "application/json"),
        ]
        let request = HTTPRequest(method: "POST", url: endpoint, headers: headers, body: body, limits: limits)
        var operationLogger = logger
        operationLogger[metadataKey: "broker.operation"] = .string(operation)
        let attemptLogger = operationLogger

        do {
            return try await retry.run(
                deadline: deadline,
                logger: operationLogger,
                operation: { attempt in
                    try await attemptOnce(
                        request, operation: operation, secrets: secrets, deadline: deadline,
                        signer: signer, attempt: attempt, logger: attemptLogger)
                },
                classify: { error in
                    guard let failure = error as? AttemptFailure else { return (.doNotRetry, nil) }
                    return (failure.disposition, failure.retryAfter)
                }
            )
        } catch let failure as AttemptFailure {
            throw failure.error
        } catch is CancellationError {
            throw FederationError(code: .cancelled, message: "\(operation) was cancelled", operation: operation)
        } catch let error as FederationError {
            throw error
        } catch {
            throw FederationError(code: .network, message: "\(operation) failed: \(type(of: error))", operation: operation)
        }
    }

    private func attemptOnce<Output: Decodable>(
        _ baseRequest: HTTPRequest,
        operation: String,
        secrets: [String],
        deadline: ContinuousClock.Instant,
        signer: SigV4Signer?,
        attempt: Int,
        logger: Logger
    ) async throws -> Output {
        let remaining = ContinuousClock.now.duration(to: deadline)
        guard remaining > .zero else {
            throw AttemptFailure(
                error: FederationError(code: .timedOut, message: "\(operation) ran past the federation timeout", operation: operation),
                disposition: .doNotRetry
            )
        }
        var request = baseRequest
        request.attempt = attempt
        request.limits.requestTimeout = min(request.limits.requestTimeout, remaining)
        // Signed per attempt: the signature covers the attempt's timestamp.
        if let signer {
            do {
                try signer.sign(&request, at: Date())
            } catch {
                throw AttemptFailure(error: error, disposition: .doNotRetry)
            }
        }
        logger.trace("sending request", metadata: ["broker.attempt": "\(attempt)"])

        let response: HTTPResponse
        do {
            response = try await transport.send(request)
        } catch let error as TransportError {
            // libcurl's messages can quote what the peer sent; scrub them like service messages.
            var failure = AttemptFailure(transportError: error, operation: operation)
            failure.error = failure.error.redacted(by: SecretRedactor(secrets: secrets))
            throw failure
        }
        logger.trace("received response", metadata: ["broker.status": "\(response.status)", "broker.attempt": "\(attempt)"])

        guard (200..<300).contains(response.status) else {
            let error = CognitoErrorDecoder.decode(response: response, operation: operation, redacting: secrets)
            throw AttemptFailure(
                error: error,
                disposition: Self.disposition(for: error),
                retryAfter: RetryRunner.retryAfterHint(headers: response.headers, now: Date())
            )
        }
        do {
            return try CognitoResponseDecoder.decode(Output.self, from: response.body, operation: operation)
        } catch {
            throw AttemptFailure(error: error, disposition: .doNotRetry)
        }
    }

    static func disposition(for error: FederationError) -> RetryDisposition {
        switch error.code {
        case .throttled: .throttling
        case .serviceUnavailable: error.httpStatus.map { [500, 502, 503, 504].contains($0) } ?? true ? .transient : .doNotRetry
        default: .doNotRetry
        }
    }
}

/// One failed attempt, with what the retry runner needs to decide.
struct AttemptFailure: Error, Sendable {
    var error: FederationError
    var disposition: RetryDisposition
    var retryAfter: Duration?

    init(error: FederationError, disposition: RetryDisposition, retryAfter: Duration? = nil) {
        self.error = error
        self.disposition = disposition
        self.retryAfter = retryAfter
    }

    init(transportError: TransportError, operation: String) {
        switch transportError.kind {
        case .timedOut:
            self.init(
                error: FederationError(code: .timedOut, message: "\(operation) timed out: \(transportError.message)", operation: operation, curlCode: transportError.curlCode),
                disposition: .timeout
            )
        case .connectFailed, .connectionLost:
            self.init(
                error: FederationError(code: .network, message: "\(operation) could not reach the identity service: \(transportError.message)", operation: operation, curlCode: transportError.curlCode),
                disposition: .transient
            )
        case .responseTooLarge:
            self.init(
                error: FederationError(code: .invalidResponse, message: "\(operation) returned a body larger than the response cap", operation: operation, curlCode: transportError.curlCode),
                disposition: .doNotRetry
            )
        case .tlsFailed:
            self.init(
                error: FederationError(code: .network, message: "\(operation) failed TLS verification of the identity service: \(transportError.message)", operation: operation, curlCode: transportError.curlCode),
                disposition: .doNotRetry
            )
        case .invalidRequest:
            self.init(
                error: FederationError(code: .invalidConfiguration, message: "\(operation) could not be sent: \(transportError.message); check the endpoint", operation: operation, curlCode: transportError.curlCode),
                disposition: .doNotRetry
            )
        case .other:
            self.init(
                error: FederationError(code: .network, message: "\(operation) failed: \(transportError.message)", operation: operation, curlCode: transportError.curlCode),
                disposition: .doNotRetry
            )
        }
    }
}

extension Logger {
    /// What the library logs to when the caller passes no logger: nothing.
    static let disabled = Logger(label: "identity-broker.disabled", factory: { _ in SwiftLogNoOpLogHandler() })
}
