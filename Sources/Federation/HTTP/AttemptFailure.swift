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

    /// A transport failure: code and disposition from ``RetryClassification``, with a
    /// message saying what happened to `operation`.
    init(transportError: TransportError, operation: String) {
        let (code, disposition) = RetryClassification.transport(transportError.kind)
        let message: String
        switch transportError.kind {
        case .timedOut:
            message = "\(operation) timed out: \(transportError.message)"
        case .connectFailed, .connectionLost:
            message = "\(operation) could not reach the identity service: \(transportError.message)"
        case .responseTooLarge:
            message = "\(operation) returned a body larger than the response cap"
        case .tlsFailed:
            message = "\(operation) failed TLS verification of the identity service: \(transportError.message)"
                + " (behind a proxy that inspects TLS, or for an endpoint with a private authority, name its certificate"
                + " authorities in AWS_CA_BUNDLE or FederationConfiguration.certificateAuthorityFile)"
        case .invalidRequest:
            message = "\(operation) could not be sent: \(transportError.message); check the endpoint"
        case .other:
            message = "\(operation) failed: \(transportError.message)"
        }
        self.init(
            error: FederationError(code: code, message: message, operation: operation, curlCode: transportError.curlCode),
            disposition: disposition)
    }
}
