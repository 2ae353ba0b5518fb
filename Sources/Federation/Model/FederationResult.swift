/// What a successful federation returns.
public struct FederationResult: Sendable, Hashable {
    /// The Cognito identity ID the credentials belong to.
    public var identityId: String
    /// The temporary credentials.
    public var credentials: AWSCredentials
    /// The classic flow's assumed-role ARN as STS reports it
    /// (`arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION`); `nil` for the enhanced flow.
    public var assumedRoleArn: String?
    /// The classic flow's subject as the role saw it (STS's `SubjectFromWebIdentityToken`:
    /// the Cognito identity ID); `nil` for the enhanced flow, or when STS did not say.
    public var webIdentitySubject: String?

    /// Creates a result.
    public init(identityId: String, credentials: AWSCredentials, assumedRoleArn: String? = nil, webIdentitySubject: String? = nil) {
        self.identityId = identityId
        self.credentials = credentials
        self.assumedRoleArn = assumedRoleArn
        self.webIdentitySubject = webIdentitySubject
    }
}
