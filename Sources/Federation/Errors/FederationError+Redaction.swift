import SecureStorage

extension FederationError {
    /// The error with every text that may quote a peer passed through `redactor`.
    func redacted(by redactor: SecretRedactor) -> FederationError {
        guard !redactor.isEmpty else { return self }
        return FederationError(
            code: code, message: redactor.redact(message), operation: operation,
            serviceErrorType: serviceErrorType.map(redactor.redact), serviceMessage: serviceMessage.map(redactor.redact),
            httpStatus: httpStatus, curlCode: curlCode, keystoreError: keystoreError, identityGone: identityGone)
    }
}
