import SecureStorage

/// Turns an STS error response (`ErrorResponse/Error/{Type,Code,Message}`) into a
/// ``FederationError``. Every documented `AssumeRoleWithWebIdentity` code maps to a
/// ``FederationError/Code`` (``RetryClassification``'s table); unknown codes keep the raw code as
/// ``FederationError/serviceErrorType``. The code and message are scrubbed of the
/// request's secrets (the provider token and the Cognito OpenID token).
package enum STSErrorDecoder {
    package static func decode(response: HTTPResponse, operation: String, redacting secrets: [String]) -> FederationError {
        let fields = STSResponseDecoder.errorFields(from: response.body)
        let redactor = SecretRedactor(secrets: secrets)
        let rawCode = fields?.code.map { $0.prefix(scalars: 128) }
        let message = fields?.message.map { CognitoErrorDecoder.scrub($0, with: redactor) }
        let errorCode = rawCode.map { RetryClassification.code(forType: $0, status: response.status, service: .sts) }
            ?? RetryClassification.code(forStatus: response.status)
        return FederationError(
            code: errorCode,
            message: summary(for: errorCode, type: rawCode, operation: operation, status: response.status),
            operation: operation,
            serviceErrorType: rawCode.map(redactor.redact),
            serviceMessage: message,
            httpStatus: response.status
        )
    }

    static func summary(for code: FederationError.Code, type: String?, operation: String, status: Int? = nil) -> String {
        switch code {
        case .serviceUnavailable where !RetryClassification.retriesServiceFailure(status: status):
            "STS failed \(operation) with HTTP \(status ?? 0), which is not retried"
        case .notAuthorized:
            "STS refused \(operation): the role does not trust this identity (check the role's trust policy: cognito-identity.amazonaws.com as federated principal, aud the pool ID, amr authenticated or unauthenticated) or the token was rejected"
        case .invalidParameter where type == "MalformedPolicyDocument":
            "STS rejected \(operation)'s session policy as malformed; fix the policy document"
        case .invalidParameter where type == "PackedPolicyTooLarge":
            "STS rejected \(operation)'s session policies as too large; shorten the inline policy or pass fewer managed policies"
        case .invalidParameter: "STS rejected a parameter of \(operation)"
        case .regionDisabled:
            "STS is not activated in this region for the role's account; activate it in IAM's account settings, or use another region"
        case .externalService: "STS could not reach the identity provider for \(operation) and retries ran out; try again later"
        case .throttled: "STS throttled \(operation) and retries ran out; slow down and try again"
        case .serviceUnavailable: "STS failed \(operation) and retries ran out; try again later"
        default: "STS rejected \(operation)"
        }
    }
}
