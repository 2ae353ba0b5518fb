/// How a failed attempt is classified: the ``FederationError/Code`` it becomes and whether
/// the retry runner tries it again. Decided here and only here, from tables, for Cognito
/// Identity and STS alike, so the two services cannot drift apart: the error decoders ask
/// for the code, ``ServiceCaller`` asks for the disposition, ``AttemptFailure`` for a
/// transport failure's pair.
///
/// The rules follow the AWS SDKs' standard retry mode: throttling codes and HTTP 429 are
/// throttling; HTTP 500/502/503/504 and transport failures that may pass (a refused or
/// broken connection, a timeout) are retried; everything the caller must change first
/// (credentials, parameters, configuration, TLS) is not.
package enum RetryClassification {
    /// The service that answered: their error type names differ, their rules mostly not.
    package enum Service: Sendable, Hashable {
        case cognitoIdentity
        case sts
    }

    /// HTTP statuses a server-side failure is retried on (the SDKs' transient statuses).
    static let retryableStatuses: Set<Int> = [500, 502, 503, 504]

    // MARK: Service error types

    /// Cognito Identity's documented error types, and the throttling codes the AWS SDKs'
    /// standard retry mode recognises for any service. STS falls back to this table.
    private static let commonTypes: [String: FederationError.Code] = {
        var table: [String: FederationError.Code] = [
            "NotAuthorizedException": .notAuthorized,
            "ResourceNotFoundException": .resourceNotFound,
            "ResourceConflictException": .resourceConflict,
            "TooManyRequestsException": .throttled,
            "LimitExceededException": .limitExceeded,
            "InvalidParameterException": .invalidParameter,
            "InvalidIdentityPoolConfigurationException": .invalidIdentityPoolConfiguration,
            "ExternalServiceException": .externalService,
            "InternalErrorException": .serviceUnavailable,
            "InternalFailure": .serviceUnavailable,
            "ServiceUnavailable": .serviceUnavailable,
            "ServiceUnavailableException": .serviceUnavailable,
            "DeveloperUserAlreadyRegisteredException": .developerUserAlreadyRegistered,
        ]
        for type in [
            "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
            "SlowDown", "ProvisionedThroughputExceededException", "RequestLimitExceeded",
            "BandwidthLimitExceeded", "RequestThrottled", "PriorRequestNotComplete", "EC2ThrottledException",
        ] {
            table[type] = .throttled
        }
        return table
    }()

    /// STS's `AssumeRoleWithWebIdentity` codes, onto the codes Cognito's errors use.
    private static let stsTypes: [String: FederationError.Code] = [
        "AccessDenied": .notAuthorized,
        "AccessDeniedException": .notAuthorized,
        "IDPRejectedClaim": .notAuthorized,
        "InvalidIdentityToken": .notAuthorized,
        "ExpiredTokenException": .notAuthorized,
        "ExpiredToken": .notAuthorized,
        "IDPCommunicationError": .externalService,
        "MalformedPolicyDocument": .invalidParameter,
        "PackedPolicyTooLarge": .invalidParameter,
        "InvalidParameterValue": .invalidParameter,
        "ValidationError": .invalidParameter,
        "RegionDisabledException": .regionDisabled,
        "InternalFailure": .serviceUnavailable,
        "ServiceUnavailable": .serviceUnavailable,
        "InternalError": .serviceUnavailable,
    ]

    /// The code for a service error `type` answered with HTTP `status`; an unknown type is
    /// a ``FederationError/Code/serviceError`` (``FederationError/Code/serviceUnavailable``
    /// for 5xx, ``FederationError/Code/throttled`` for 429: a front end's or proxy's rate
    /// limit, retried as throttling) that keeps the raw type in ``FederationError/serviceErrorType``.
    static func code(forType type: String, status: Int, service: Service) -> FederationError.Code {
        if service == .sts, let code = stsTypes[type] { return code }
        if let code = commonTypes[type] { return code }
        switch status {
        case 429: return .throttled
        case 500...: return .serviceUnavailable
        default: return .serviceError
        }
    }

    /// The code for an error response that names no type.
    static func code(forStatus status: Int) -> FederationError.Code {
        switch status {
        case 429: .throttled
        case 500...: .serviceUnavailable
        default: .serviceError
        }
    }

    // MARK: Retrying service errors

    /// What a code means for retrying.
    private enum Rule {
        case throttling
        case transient
        /// Transient when the status is one of ``retryableStatuses`` (or unknown): a 5xx
        /// type sent with a 4xx, or a 501, will not pass by retrying.
        case transientOnRetryableStatus
    }

    private static let commonRules: [FederationError.Code: Rule] = [
        .throttled: .throttling,
        .serviceUnavailable: .transientOnRetryableStatus,
    ]

    /// STS adds `IDPCommunicationError`: the identity provider could not be reached, which
    /// may pass. (Cognito's `ExternalServiceException` reports the provider's refusal.)
    private static let stsRules: [FederationError.Code: Rule] = [
        .externalService: .transient,
    ]

    /// Whether a service failure (``FederationError/Code/serviceUnavailable``) answered with
    /// HTTP `status` is retried: one of ``retryableStatuses``, or no status known.
    package static func retriesServiceFailure(status: Int?) -> Bool {
        status.map(retryableStatuses.contains) ?? true
    }

    /// Whether `error`, decoded from `service`'s answer, is retried; codes without a rule
    /// are not.
    package static func disposition(for error: FederationError, service: Service) -> RetryDisposition {
        let serviceRule = service == .sts ? stsRules[error.code] : nil
        switch serviceRule ?? commonRules[error.code] {
        case .throttling: return .throttling
        case .transient: return .transient
        case .transientOnRetryableStatus:
            return retriesServiceFailure(status: error.httpStatus) ? .transient : .doNotRetry
        case nil: return .doNotRetry
        }
    }

    // MARK: Transport failures

    /// A transport failure's code and disposition, the same for every service.
    static func transport(_ kind: TransportError.Kind) -> (code: FederationError.Code, disposition: RetryDisposition) {
        transportTable[kind] ?? (.network, .doNotRetry)
    }

    private static let transportTable: [TransportError.Kind: (code: FederationError.Code, disposition: RetryDisposition)] = [
        .timedOut: (.timedOut, .timeout),
        .connectFailed: (.network, .transient),
        .connectionLost: (.network, .transient),
        .responseTooLarge: (.invalidResponse, .doNotRetry),
        .tlsFailed: (.network, .doNotRetry),
        .invalidRequest: (.invalidConfiguration, .doNotRetry),
        .other: (.network, .doNotRetry),
    ]
}
