#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What STS `AssumeRoleWithWebIdentity` is asked for in the classic flow
/// (``FederationFlow/classic(_:)``).
///
/// Checked locally before any request: a value STS would refuse fails with
/// ``FederationError/Code/invalidConfiguration`` and nothing is sent.
///
/// ```swift
/// let options = FederationOptions(flow: .classic(ClassicFlowOptions(
///     roleArn: "arn:aws:iam::123456789012:role/ReadOnly",
///     durationSeconds: 900)))
/// ```
public struct ClassicFlowOptions: Sendable, Hashable {
    /// The shortest session STS grants: 900 seconds.
    public static let minimumDurationSeconds = 900
    /// The longest session STS grants: 43,200 seconds (12 hours; the role's own maximum
    /// session duration may be lower, and STS then refuses the request).
    public static let maximumDurationSeconds = 43_200
    /// The most managed policy ARNs STS accepts in one request.
    public static let maximumManagedPolicies = 10

    /// The IAM role to assume, `arn:PARTITION:iam::ACCOUNT:role/NAME`. Required.
    public var roleArn: String
    /// The role session name STS records (in CloudTrail and the assumed-role ARN): 2 to 64
    /// characters of letters, digits and `_ + = , . @ -`. `nil` (the default) derives one
    /// from the session name (see ``RoleSessionName``).
    public var roleSessionName: String?
    /// How long the credentials last, 900 to 43,200 seconds; `nil` (the default) leaves
    /// it to STS (one hour).
    public var durationSeconds: Int?
    /// An inline session policy (IAM policy JSON, a JSON object) that narrows the role's
    /// permissions for this session. Default `nil`.
    public var sessionPolicy: String?
    /// Managed policies (ARNs) that narrow the role's permissions for this session, at most
    /// ``maximumManagedPolicies``. Default none.
    public var managedPolicyArns: [String]

    /// Creates options for assuming `roleArn`.
    public init(
        roleArn: String,
        roleSessionName: String? = nil,
        durationSeconds: Int? = nil,
        sessionPolicy: String? = nil,
        managedPolicyArns: [String] = []
    ) {
        self.roleArn = roleArn
        self.roleSessionName = roleSessionName
        self.durationSeconds = durationSeconds
        self.sessionPolicy = sessionPolicy
        self.managedPolicyArns = managedPolicyArns
    }
}

extension ClassicFlowOptions {
    /// Whether `arn` has an IAM role ARN's shape (`arn:PARTITION:iam::ACCOUNT:role/NAME`,
    /// printable ASCII, at most 2048 bytes), as STS and Cognito take one.
    package static func isRoleArn(_ arn: String) -> Bool {
        let parts = arn.split(separator: ":", maxSplits: 5, omittingEmptySubsequences: false)
        return parts.count == 6 && parts[0] == "arn" && parts[2] == "iam" && parts[5].hasPrefix("role/")
            && arn.utf8.count <= 2048 && arn.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F })
    }

    /// Whether `policy` is a JSON object, as a session policy must be. Control characters
    /// other than tab and line breaks, and a byte order mark, are refused first: JSON allows
    /// none, the decoder would read text with NULs between its characters as UTF-16, and it
    /// would skip a byte order mark that STS is then sent.
    package static func isJSONObject(_ policy: String) -> Bool {
        guard !policy.unicodeScalars.contains(where: { ($0.value < 0x20 && !["\t", "\n", "\r"].contains($0)) || $0 == "\u{FEFF}" }) else {
            return false
        }
        return (try? JSONCoders.decoder.decode(JSONObjectProbe.self, from: Data(policy.utf8))) != nil
    }

    /// What a session policy looks like, for messages that refuse one.
    package static let policyExample = #"pass IAM policy JSON like {"Version": "2012-10-17", "Statement": [...]}"#

    /// Checks what STS would refuse, before anything is sent (and, in the CLI, before the
    /// keystore is opened, so that a usage error creates nothing).
    package func validate() throws(FederationError) {
        func invalid(_ message: String) -> FederationError {
            FederationError(code: .invalidConfiguration, message: message)
        }
        guard Self.isRoleArn(roleArn) else {
            throw invalid("the classic flow's role ARN '\(String(roleArn.prefix(100)))' is not an IAM role ARN like arn:aws:iam::123456789012:role/NAME")
        }
        if let roleSessionName, !RoleSessionName.isValid(roleSessionName) {
            throw invalid("the role session name must be 2 to 64 characters of letters, digits and _ + = , . @ -")
        }
        if let durationSeconds, !(Self.minimumDurationSeconds...Self.maximumDurationSeconds).contains(durationSeconds) {
            throw invalid("the classic flow's duration must be \(Self.minimumDurationSeconds) to \(Self.maximumDurationSeconds) seconds, not \(durationSeconds)")
        }
        if let sessionPolicy, sessionPolicy.allSatisfy(\.isWhitespace) {
            throw invalid("the session policy is empty; leave it out instead")
        }
        // STS refuses it too (MalformedPolicyDocument), but only after Cognito has been
        // asked for the OpenID token that its refusal then wastes.
        if let sessionPolicy, !Self.isJSONObject(sessionPolicy) {
            throw invalid("the session policy is not a JSON object; \(Self.policyExample)")
        }
        if managedPolicyArns.count > Self.maximumManagedPolicies {
            throw invalid("at most \(Self.maximumManagedPolicies) managed policy ARNs can narrow a session, not \(managedPolicyArns.count)")
        }
        if managedPolicyArns.contains(where: { !$0.hasPrefix("arn:") }) {
            throw invalid("every managed policy ARN must start with arn:")
        }
    }
}
