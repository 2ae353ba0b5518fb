#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
public import Logging

/// The backend half of developer-authenticated identities: mints Cognito OpenID
/// tokens for your own users with `GetOpenIdTokenForDeveloperIdentity`, signed
/// with your AWS credentials (SigV4).
///
/// AWS refuses a signature more than five minutes from its own clock. When it refuses one
/// for its time, the issuer takes the service's clock from the answer's `Date` header and
/// signs again (logging a warning to fix the host's clock), as the AWS SDKs do; copies of
/// an issuer share what it learned.
///
/// ```swift
/// guard let credentials = SigningCredentials.fromEnvironment(ProcessInfo.processInfo.environment) else {
///     throw MyBackendError.missingAWSCredentials   // AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY unset
/// }
/// let issuer = try DeveloperIdentityIssuer(
///     configuration: .init(identityPoolId: poolId),
///     developerProviderName: "login.mycompany",
///     credentials: credentials)
/// let minted = try await issuer.openIdToken(forUser: "user-42")
/// // hand minted.identityId and minted.token to the client, which calls
/// // federate(token: minted.token, provider: .developer,
/// //          options: .init(developerProvidedIdentityId: minted.identityId))
/// ```
public struct DeveloperIdentityIssuer: Sendable {
    /// The pool and endpoint settings.
    public let configuration: FederationConfiguration
    /// The developer provider name configured on the pool.
    public let developerProviderName: String

    private let cognito: CognitoIdentityClient
    private let signer: SigV4Signer
    private let logger: Logger

    /// Creates an issuer.
    ///
    /// - Throws: ``FederationError/Code/invalidConfiguration`` for an unusable pool
    ///   ID, region, endpoint or certificate authority file, or an empty provider name.
    public init(
        configuration: FederationConfiguration,
        developerProviderName: String,
        credentials: SigningCredentials,
        logger: Logger? = nil
    ) throws(FederationError) {
        try self.init(
            configuration: configuration,
            developerProviderName: developerProviderName,
            credentials: credentials,
            transport: CurlTransport.shared,
            environment: ProcessInfo.processInfo.environment,
            logger: logger
        )
    }

    init(
        configuration: FederationConfiguration,
        developerProviderName: String,
        credentials: SigningCredentials,
        transport: any HTTPTransport,
        environment: [String: String],
        retryRunner: RetryRunner? = nil,
        logger: Logger?
    ) throws(FederationError) {
        guard !developerProviderName.isEmpty else {
            throw FederationError(code: .invalidConfiguration, message: "the developer provider name is empty; use the name configured on the identity pool")
        }
        self.configuration = configuration
        self.developerProviderName = developerProviderName
        cognito = try CognitoIdentityClient(
            configuration: configuration, transport: transport, environment: environment, retryRunner: retryRunner)
        signer = SigV4Signer(credentials: credentials, region: try configuration.resolvedRegion(), service: "cognito-identity")
        self.logger = logger ?? .disabled
    }

    /// Mints a token for `userId`, creating or reusing the identity it is linked to.
    ///
    /// - Parameters:
    ///   - userId: your backend's ID for the user.
    ///   - identityId: an identity to link the user to, when merging.
    ///   - tokenDuration: how long the token stays valid (the service allows up to 24 h; default 15 min).
    public func openIdToken(
        forUser userId: String,
        identityId: String? = nil,
        tokenDuration: Duration? = nil
    ) async throws(FederationError) -> DeveloperToken {
        guard !userId.isEmpty else {
            throw FederationError(code: .invalidParameter, message: "the developer user ID is empty")
        }
        let output = try await cognito.getOpenIdTokenForDeveloperIdentity(
            identityPoolId: configuration.identityPoolId,
            identityId: identityId,
            logins: [developerProviderName: userId],
            tokenDuration: tokenDuration,
            signer: signer,
            deadline: ContinuousClock.now.advanced(by: configuration.federationTimeout),
            logger: logger
        )
        guard let id = output.identityId else {
            throw FederationError(
                code: .invalidResponse, message: "GetOpenIdTokenForDeveloperIdentity returned a response without the field 'IdentityId'",
                operation: "GetOpenIdTokenForDeveloperIdentity")
        }
        return DeveloperToken(identityId: id, token: output.token)
    }
}
