#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging

/// The classic (basic) authflow as the `credentials` step of a federation:
/// `GetOpenIdToken` for the session's identity, then STS `AssumeRoleWithWebIdentity`.
/// Everything around it (identity choice, GetId, the identity-ID cache, states,
/// persistence, events, the terminated rule) is the enhanced flow's.
extension FederationClient {
    /// A checked classic-flow request, made before the session's lock is taken.
    struct ClassicPlan: Sendable {
        var sts: STSClient
        var options: ClassicFlowOptions
        var roleSessionName: String
    }

    /// The classic plan for `options`, or `nil` for the enhanced flow; checks every
    /// local rule first (nothing is sent when one fails).
    func classicPlan(for options: FederationOptions, session: String) throws(FederationError) -> ClassicPlan? {
        guard let classic = options.flow.classicOptions else { return nil }
        guard options.customRoleArn == nil else {
            throw FederationError(
                code: .invalidConfiguration,
                message: "the classic flow assumes ClassicFlowOptions.roleArn; customRoleArn belongs to the enhanced flow, so set only one")
        }
        try classic.validate()
        guard let sts else {
            throw FederationError(
                code: .invalidConfiguration,
                message: "this client was created without a pool configuration and can only read, observe and clear sessions")
        }
        let client = try sts.get()
        return ClassicPlan(sts: client, options: classic, roleSessionName: classic.roleSessionName ?? RoleSessionName.derived(from: session))
    }

    /// `GetOpenIdToken` for `identityId`, then `AssumeRoleWithWebIdentity` with that token.
    /// The OpenID token lives only in this call: never stored, logged or returned, and
    /// scrubbed (with the provider tokens) from every error.
    static func classicCredentials(
        cognito: CognitoIdentityClient,
        plan: ClassicPlan,
        identityId: String,
        logins: [String: String]?,
        deadline: ContinuousClock.Instant,
        logger: Logger
    ) async throws(FederationError) -> FederationResult {
        let openId = try await cognito.getOpenIdToken(identityId: identityId, logins: logins, deadline: deadline, logger: logger)
        logger.debug(
            "classic flow: assuming the role with the identity's OpenID token",
            metadata: ["broker.roleArn": "\(plan.options.roleArn)", "broker.roleSessionName": "\(plan.roleSessionName)"])
        let secrets = (logins.map { Array($0.values) } ?? []) + [openId.token]
        let assumed = try await plan.sts.assumeRoleWithWebIdentity(
            options: plan.options, roleSessionName: plan.roleSessionName, webIdentityToken: openId.token,
            secrets: secrets, deadline: deadline, logger: logger)
        return FederationResult(
            identityId: openId.identityId, credentials: assumed.credentials,
            assumedRoleArn: assumed.assumedRoleArn, webIdentitySubject: assumed.subject)
    }
}
