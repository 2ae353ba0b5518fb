#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SecureStorage

/// Turns a Cognito Identity error response into a ``FederationError``.
///
/// The type comes from `x-amzn-ErrorType` when present, else from the body's
/// `__type`; either may carry a namespace before `#` or a URI after `:`, which
/// are stripped. Unknown types keep their raw name.
package enum CognitoErrorDecoder {
    /// Longest service message kept; longer ones are cut, since they end up in logs.
    package static let maxMessageLength = 512

    ///
    /// - Parameter namesIdentity: whether `operation` acts on an existing identity ID
    ///   (`GetCredentialsForIdentity`, `GetOpenIdToken`): only then can the answer say that
    ///   identity is gone (``FederationError/identityGone``).
    package static func decode(
        response: HTTPResponse,
        operation: String,
        namesIdentity: Bool = false,
        redacting secrets: [String]
    ) -> FederationError {
        let body = try? JSONCoders.decoder.decode(WireErrorBody.self, from: Data(response.body))
        let rawType = response.header("x-amzn-errortype").flatMap(normalizedType) ?? body?.type.flatMap(normalizedType)
        // Everything the service says is scrubbed before it is kept: it may echo the token.
        let redactor = SecretRedactor(secrets: secrets)
        let message = body?.message.map { scrub($0, with: redactor) }
        let errorCode = rawType.map { RetryClassification.code(forType: $0, status: response.status, service: .cognitoIdentity) }
            ?? RetryClassification.code(forStatus: response.status)
        return FederationError(
            code: errorCode,
            message: summary(for: errorCode, operation: operation, status: response.status),
            operation: operation,
            serviceErrorType: rawType.map(redactor.redact),
            serviceMessage: message,
            httpStatus: response.status,
            curlCode: nil,
            keystoreError: nil,
            identityGone: namesIdentity && saysIdentityGone(code: errorCode, message: message)
        )
    }

    /// `aws.cognito#NotAuthorizedException:http://…` → `NotAuthorizedException`.
    static func normalizedType(_ raw: String) -> String? {
        var type = Substring(raw)
        if let colon = type.firstIndex(of: ":") { type = type[..<colon] }
        if let hash = type.lastIndex(of: "#") { type = type[type.index(after: hash)...] }
        let trimmed = type.trimmingWhitespace
        return trimmed.isEmpty ? nil : trimmed.prefix(scalars: 128)
    }

    /// Whether Cognito's answer to an operation on one identity says that identity is gone:
    /// `ResourceNotFoundException`, or `NotAuthorizedException` saying the identity is
    /// disabled or forbidden ("Identity '…' is disabled.", "Access to Identity '…' is
    /// forbidden."). Read from the scrubbed message, so a secret can never decide it.
    static func saysIdentityGone(code: FederationError.Code, message: String?) -> Bool {
        if code == .resourceNotFound { return true }
        guard code == .notAuthorized, let message = message?.lowercased() else { return false }
        return message.contains("disabled") || message.contains("forbidden")
    }

    static func summary(for code: FederationError.Code, operation: String, status: Int? = nil) -> String {
        switch code {
        case .serviceUnavailable where !RetryClassification.retriesServiceFailure(status: status):
            "the identity service failed \(operation) with HTTP \(status ?? 0), which is not retried"
        case .notAuthorized: "\(operation) was not authorized: the provider token was rejected or does not match the identity; get a fresh token"
        case .resourceNotFound: "\(operation) named something the service does not have; check the identity pool ID and region"
        case .throttled: "\(operation) was throttled by the identity service and retries ran out; slow down and try again"
        case .serviceUnavailable: "the identity service failed \(operation) and retries ran out; try again later"
        case .invalidIdentityPoolConfiguration: "the identity pool's configuration rejects \(operation); check its roles and providers"
        case .invalidParameter: "the identity service rejected a parameter of \(operation)"
        default: "the identity service rejected \(operation)"
        }
    }

    /// Removes every run of a sent secret from `message` and shortens it.
    static func scrub(_ message: String, with redactor: SecretRedactor) -> String {
        // Redact before cutting, so a cut cannot leave a run too short to be recognised.
        var text = redactor.redact(message)
        if text.exceeds(scalars: maxMessageLength) { text = text.prefix(scalars: maxMessageLength) + "…" }
        return text
    }
}
