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
