#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import SecureStorage

/// Sends one AWS operation with the standard retry mode until a deadline: what the
/// Cognito Identity and STS clients share (transport, retry quota, per-attempt timeout
/// cut to the time left, scrubbing of libcurl's messages). Each protocol brings its
/// own error and output decoding.
struct ServiceCaller: Sendable {
    let transport: any HTTPTransport
    let retry: RetryRunner

    /// Sends `request` for `operation`, retrying what ``RetryClassification`` allows for
    /// `service` until `deadline`.
    ///
    /// - Parameters:
    ///   - secrets: everything in the request that must never come back in an error.
    ///   - decodeError: turns a non-2xx answer into an error (already scrubbed of `secrets`).
    ///   - service: whose retry rules apply to an error from `decodeError`.
    ///   - decodeOutput: reads a 2xx body.
    func send<Output: Sendable>(
        _ request: HTTPRequest,
        operation: String,
        secrets: [String],
        deadline: ContinuousClock.Instant,
        signer: SigV4Signer? = nil,
        logger: Logger,
        service: RetryClassification.Service,
        decodeError: @escaping @Sendable (HTTPResponse) -> FederationError,
        decodeOutput: @escaping @Sendable ([UInt8]) throws(FederationError) -> Output
    ) async throws(FederationError) -> Output {
        var operationLogger = logger
        operationLogger[metadataKey: "broker.operation"] = .string(operation)
        let attemptLogger = operationLogger
        do {
            return try await retry.run(
                deadline: deadline,
                logger: operationLogger,
                operation: { attempt in
                    try await attemptOnce(
                        request, operation: operation, secrets: secrets, deadline: deadline, signer: signer,
                        attempt: attempt, logger: attemptLogger,
                        service: service, decodeError: decodeError, decodeOutput: decodeOutput)
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

    private func attemptOnce<Output>(
        _ baseRequest: HTTPRequest,
        operation: String,
        secrets: [String],
        deadline: ContinuousClock.Instant,
        signer: SigV4Signer?,
        attempt: Int,
        logger: Logger,
        service: RetryClassification.Service,
        decodeError: (HTTPResponse) -> FederationError,
        decodeOutput: ([UInt8]) throws(FederationError) -> Output
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
        // Signed per attempt: the signature covers the attempt's timestamp, by the service's
        // clock as far as it is known.
        let signedAt = signer?.clock.now()
        if let signer, let signedAt {
            do {
                try signer.sign(&request, at: signedAt)
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
            let error = decodeError(response)
            var disposition = RetryClassification.disposition(for: error, service: service)
            if let signer, let signedAt,
               signer.clock.learn(
                   errorType: error.serviceErrorType, message: error.serviceMessage, headers: response.headers, signedAt: signedAt)
            {
                // Refused for this host's clock, now corrected: signed again, it can pass.
                logger.warning(
                    "the service refused a signature for this host's clock; signing by the service's clock from now on (fix the host's clock: NTP)",
                    metadata: ["broker.serviceError": "\(error.serviceErrorType ?? "")"])
                disposition = .transient
            }
            throw AttemptFailure(
                error: error,
                disposition: disposition,
                retryAfter: RetryRunner.retryAfterHint(headers: response.headers, now: signer?.clock.now() ?? Date())
            )
        }
        do {
            return try decodeOutput(response.body)
        } catch {
            throw AttemptFailure(error: error, disposition: .doNotRetry)
        }
    }
}
