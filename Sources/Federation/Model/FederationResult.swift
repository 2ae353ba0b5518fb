/// What a successful federation returns.
public struct FederationResult: Sendable, Hashable {
    /// The Cognito identity ID the credentials belong to.
    public var identityId: String
    /// The temporary credentials.
    public var credentials: AWSCredentials

    /// Creates a result.
    public init(identityId: String, credentials: AWSCredentials) {
        self.identityId = identityId
        self.credentials = credentials
    }
}
