/// Optional inputs to a federation, mirroring Amplify's `FederateToIdentityPoolOptions`,
/// plus the authflow.
public struct FederationOptions: Sendable, Hashable {
    /// An identity ID your backend already knows for this user (the
    /// developer-authenticated flow). When set, the exchange skips `GetId`.
    public var developerProvidedIdentityId: String?
    /// The IAM role to assume in the enhanced flow, when the pool lets the token choose
    /// among several. Not used by the classic flow, which names its role in
    /// ``ClassicFlowOptions/roleArn`` (setting both is an
    /// ``FederationError/Code/invalidConfiguration`` error).
    public var customRoleArn: String?
    /// The authflow: ``FederationFlow/enhanced`` (the default) or
    /// ``FederationFlow/classic(_:)``.
    public var flow: FederationFlow

    /// Creates options; the identity ID and role default to `nil`, the flow to enhanced.
    public init(developerProvidedIdentityId: String? = nil, customRoleArn: String? = nil, flow: FederationFlow = .enhanced) {
        self.developerProvidedIdentityId = developerProvidedIdentityId
        self.customRoleArn = customRoleArn
        self.flow = flow
    }
}
