/// What `AssumeRoleWithWebIdentity` returned.
struct AssumedRoleOutput: Sendable, Hashable {
    var credentials: AWSCredentials
    /// `AssumedRoleUser/Arn`.
    var assumedRoleArn: String?
    /// `SubjectFromWebIdentityToken`.
    var subject: String?
}
