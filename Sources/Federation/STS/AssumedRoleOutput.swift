/// What `AssumeRoleWithWebIdentity` returned.
package struct AssumedRoleOutput: Sendable, Hashable {
    package var credentials: AWSCredentials
    /// `AssumedRoleUser/Arn`.
    var assumedRoleArn: String?
    /// `SubjectFromWebIdentityToken`.
    var subject: String?
}
