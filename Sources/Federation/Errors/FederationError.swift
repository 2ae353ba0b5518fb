public import SecureStorage

/// An error from a ``FederationClient`` call.
///
/// Match on ``code``, a stable value that gains new members without breaking
/// existing `switch`es (compare with `==`, as with async-http-client's
/// `HTTPClientError`). The error carries the service's own error type, message and
/// HTTP status when the identity service answered; when the network failed, its
/// ``description`` names libcurl's `CURLcode` for support. It never carries a provider token, secret key, session token
/// or keystore key: everything the service sent (message, error type) is scrubbed of
/// every run of 16 or more characters of the request's secrets, in any letter case.
public struct FederationError: Error, Sendable {
    /// The stable kind of a ``FederationError``.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable, CaseIterable {
            case notAuthorized
            case identityTerminated
            case resourceNotFound
            case resourceConflict
            case throttled
            case limitExceeded
            case invalidParameter
            case invalidIdentityPoolConfiguration
            case externalService
            case developerUserAlreadyRegistered
            case serviceError
            case serviceUnavailable
            case timedOut
            case network
            case invalidResponse
            case invalidToken
            case invalidConfiguration
            case cancelled
            case noValidCredentials
            case storage
            case sessionConflict
            case cryptoFailure
            case regionDisabled
        }

        private let base: Base

        private init(_ base: Base) { self.base = base }

        /// The provider token was rejected, or the login does not match the identity (`NotAuthorizedException`);
        /// in the classic flow, STS refused to assume the role (`AccessDenied`, `IDPRejectedClaim`,
        /// `InvalidIdentityToken`, `ExpiredTokenException`).
        public static let notAuthorized = Code(.notAuthorized)
        /// The identity is gone or disabled; the session is now ``SessionState/terminated``.
        public static let identityTerminated = Code(.identityTerminated)
        /// The identity pool (or another named resource) does not exist (`ResourceNotFoundException`).
        public static let resourceNotFound = Code(.resourceNotFound)
        /// The request conflicts with the resource's state (`ResourceConflictException`).
        public static let resourceConflict = Code(.resourceConflict)
        /// The service throttled the caller (`TooManyRequestsException`, STS `Throttling`, HTTP 429) and retries ran out.
        public static let throttled = Code(.throttled)
        /// An account limit was reached (`LimitExceededException`).
        public static let limitExceeded = Code(.limitExceeded)
        /// The service rejected a parameter (`InvalidParameterException`); in the classic flow, the
        /// session policy (`MalformedPolicyDocument`, `PackedPolicyTooLarge`).
        public static let invalidParameter = Code(.invalidParameter)
        /// The pool's roles or providers are misconfigured (`InvalidIdentityPoolConfigurationException`).
        public static let invalidIdentityPoolConfiguration = Code(.invalidIdentityPoolConfiguration)
        /// The identity provider behind the token failed (`ExternalServiceException`, STS
        /// `IDPCommunicationError`, which is retried).
        public static let externalService = Code(.externalService)
        /// The developer user is already linked elsewhere (`DeveloperUserAlreadyRegisteredException`).
        public static let developerUserAlreadyRegistered = Code(.developerUserAlreadyRegistered)
        /// The service returned an error type this library does not know; see ``FederationError/serviceErrorType``.
        public static let serviceError = Code(.serviceError)
        /// The service failed (`InternalErrorException`, HTTP 5xx) and retries ran out.
        public static let serviceUnavailable = Code(.serviceUnavailable)
        /// An attempt or the whole call ran past its timeout.
        public static let timedOut = Code(.timedOut)
        /// The connection could not be made or broke (``FederationError/description`` names libcurl's `CURLcode`).
        public static let network = Code(.network)
        /// The response could not be understood: malformed, truncated, missing a field, or too large.
        public static let invalidResponse = Code(.invalidResponse)
        /// The provider token failed a local check (not a JWT, expired, no `sub`) before any network call.
        public static let invalidToken = Code(.invalidToken)
        /// The configuration is unusable (pool ID, region, endpoint, session name).
        public static let invalidConfiguration = Code(.invalidConfiguration)
        /// The calling task was cancelled.
        public static let cancelled = Code(.cancelled)
        /// The session has no valid credentials (none, or expired): push a new provider token.
        public static let noValidCredentials = Code(.noValidCredentials)
        /// Saving or loading the session in its keystore failed.
        public static let storage = Code(.storage)
        /// The call would silently replace what the session holds (a guest identity over
        /// an authenticated one): clear the session first.
        public static let sessionConflict = Code(.sessionConflict)
        /// libcrypto failed unexpectedly (for example while signing a request with SigV4);
        /// ``FederationError/keystoreError`` holds the `cryptoFailure` error and its OpenSSL code.
        public static let cryptoFailure = Code(.cryptoFailure)

        /// STS is not activated in the region for the account that owns the role
        /// (`RegionDisabledException`): activate it in IAM's account settings or use another region.
        public static let regionDisabled = Code(.regionDisabled)

        /// Every code, so tests can prove each one is handled (a new code cannot fall through).
        package static var allCases: [Code] { Base.allCases.map(Code.init) }

        /// The code's name, e.g. `notAuthorized`.
        public var description: String { base.rawValue }
    }

    /// The stable kind of error.
    public let code: Code
    /// What went wrong and what to do, in one sentence. Never holds a secret.
    public let message: String
    /// The operation that failed, e.g. `GetCredentialsForIdentity` or `AssumeRoleWithWebIdentity`.
    public let operation: String?
    /// The service's error type as sent (e.g. `NotAuthorizedException`), kept raw for unknown types.
    public let serviceErrorType: String?
    /// The service's message, scrubbed of the request's secrets and shortened.
    public let serviceMessage: String?
    /// The HTTP status of the service's answer.
    public let httpStatus: Int?
    /// The libcurl `CURLcode` behind a network failure. Package access: libcurl is how the
    /// library reaches the network, not part of its API, so users see the code only in
    /// ``description`` (for support) and tests can still assert it.
    package let curlCode: Int32?
    /// The keystore's error behind a ``Code/storage`` failure, or SecureStorage's libcrypto
    /// error behind a ``Code/cryptoFailure``.
    public let keystoreError: KeystoreError?

    /// Whether the service said the identity itself is gone (not found, disabled or
    /// forbidden), decided where Cognito's answer is decoded (``CognitoErrorDecoder``) and
    /// read by the federation, which then makes the session `terminated`. Internal: users
    /// see the result as ``Code/identityTerminated``.
    let identityGone: Bool

    /// Package access: only the library makes these errors, so its fields can change
    /// without breaking users; the CLI and tests build them to check how they are shown.
    package init(
        code: Code,
        message: String,
        operation: String? = nil,
        serviceErrorType: String? = nil,
        serviceMessage: String? = nil,
        httpStatus: Int? = nil,
        curlCode: Int32? = nil,
        keystoreError: KeystoreError? = nil
    ) {
        self.init(
            code: code, message: message, operation: operation, serviceErrorType: serviceErrorType,
            serviceMessage: serviceMessage, httpStatus: httpStatus, curlCode: curlCode,
            keystoreError: keystoreError, identityGone: false)
    }

    init(
        code: Code,
        message: String,
        operation: String?,
        serviceErrorType: String?,
        serviceMessage: String?,
        httpStatus: Int?,
        curlCode: Int32?,
        keystoreError: KeystoreError?,
        identityGone: Bool
    ) {
        // The service's words (and messages that quote them) come from a peer that may be
        // hostile: no control or bidirectional formatting character of theirs reaches a
        // terminal or a log line.
        self.code = code
        self.message = message.escapingControlCharacters
        self.operation = operation
        self.serviceErrorType = serviceErrorType?.escapingControlCharacters
        self.serviceMessage = serviceMessage?.escapingControlCharacters
        self.httpStatus = httpStatus
        self.curlCode = curlCode
        self.keystoreError = keystoreError
        self.identityGone = identityGone
    }
}

extension FederationError: CustomStringConvertible, CustomDebugStringConvertible {
    /// `code: message` followed by the service context, on one line.
    public var description: String {
        var parts = ["\(code): \(message)"]
        if let operation { parts.append("operation: \(operation)") }
        if let serviceErrorType { parts.append("service error: \(serviceErrorType)") }
        if let serviceMessage { parts.append("service message: \(serviceMessage)") }
        if let httpStatus { parts.append("HTTP \(httpStatus)") }
        if let curlCode { parts.append("CURLcode \(curlCode)") }
        if let keystoreError { parts.append("keystore: \(keystoreError)") }
        return parts.joined(separator: "; ")
    }

    /// The same text as ``description``.
    public var debugDescription: String { "FederationError(\(description))" }
}
