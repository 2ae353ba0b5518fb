/// Optional inputs to a federation, mirroring Amplify's `FederateToIdentityPoolOptions`.
public struct FederationOptions: Sendable, Hashable {
    /// An identity ID your backend already knows for this user (the
    /// developer-authenticated flow). When set, the exchange skips `GetId`.
    public var developerProvidedIdentityId: String?
    /// The IAM role to assume, when the pool lets the token choose among several.
    public var customRoleArn: String?

    /// Creates options; both default to `nil`.
    public init(developerProvidedIdentityId: String? = nil, customRoleArn: String? = nil) {
        self.developerProvidedIdentityId = developerProvidedIdentityId
        self.customRoleArn = customRoleArn
    }
}
