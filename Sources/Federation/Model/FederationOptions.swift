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

    /// Whether `identityId` has the shape of a Cognito identity ID: `REGION:ID`, both parts
    /// letters, digits, `_` and `-`, at most 55 characters in all (Cognito's own are
    /// `REGION:GUID`). A ``developerProvidedIdentityId`` of another shape is refused before
    /// any request (``FederationError/Code/invalidConfiguration``): the service would refuse
    /// it anyway, or, at an endpoint that is not AWS, echo it back where it does harm.
    package static func isIdentityIdShaped(_ identityId: String) -> Bool {
        let bytes = Array(identityId.utf8)
        let parts = bytes.split(separator: UInt8(ascii: ":"), omittingEmptySubsequences: false)
        return bytes.count <= 55 && parts.count == 2 && parts.allSatisfy { part in
            !part.isEmpty && part.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                     UInt8(ascii: "_"), UInt8(ascii: "-"):
                    true
                default:
                    false
                }
            }
        }
    }

    /// Checks what the service would refuse, before anything is sent: an identity ID not
    /// shaped like one (never quoted: a token pasted in its place would be), a role that is no
    /// IAM role ARN.
    func validate() throws(FederationError) {
        if let id = developerProvidedIdentityId, !Self.isIdentityIdShaped(id) {
            throw FederationError(
                code: .invalidConfiguration,
                message: "developerProvidedIdentityId (\(id.utf8.count) bytes) is not a Cognito identity ID: REGION:ID, letters, digits, _ and -, at most 55 characters, as us-east-1:0f1e2d3c-…")
        }
        if let customRoleArn, !ClassicFlowOptions.isRoleArn(customRoleArn) {
            throw FederationError(
                code: .invalidConfiguration,
                message: "customRoleArn (\(customRoleArn.utf8.count) bytes) is not an IAM role ARN like arn:aws:iam::123456789012:role/NAME")
        }
    }

    /// Creates options; the identity ID and role default to `nil`, the flow to enhanced.
    public init(developerProvidedIdentityId: String? = nil, customRoleArn: String? = nil, flow: FederationFlow = .enhanced) {
        self.developerProvidedIdentityId = developerProvidedIdentityId
        self.customRoleArn = customRoleArn
        self.flow = flow
    }
}
