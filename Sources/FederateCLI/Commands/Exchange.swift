import Federation
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What `login` and `guest` share: the configuration from the options, and the output.
enum Exchange {
    /// The configuration for a command that talks to the identity service, checked (pool ID,
    /// region, endpoints, `AWS_CA_BUNDLE`) before anything is read or opened: a usage error
    /// neither waits for a token on standard input nor creates a keystore.
    static func configuration(_ common: CommonOptions, poolId: String, flow: FlowOptions) throws(CLIFailure) -> FederationConfiguration {
        let configuration = FederationConfiguration(
            identityPoolId: poolId,
            region: common.region,
            endpoint: common.endpoint,
            stsEndpoint: flow.stsEndpoint,
            expiryMargin: common.margin,
            allowInsecureEndpoint: common.allowInsecureEndpoint
        )
        do {
            try configuration.check(environment: ProcessInfo.processInfo.environment)
        } catch {
            throw CLIFailure.invalidConfiguration(error)
        }
        return configuration
    }

    /// Prints a fresh federation's credentials; warns on stderr when they are already
    /// inside the expiry margin (then `federate credentials` will not hand them out).
    static func report(
        _ result: FederationResult, format: OutputFormat, provider: String, common: CommonOptions
    ) throws(CLIFailure) {
        do {
            try Terminal.out(Rendering.credentials(
                result.credentials, format: format, identityId: result.identityId, provider: provider, session: common.session))
        } catch {
            throw CLIFailure(error.status, "\(error.message); the session was saved: 'federate credentials --session \(common.session)' prints it")
        }
        if result.credentials.isExpired(margin: common.margin) {
            Terminal.note(
                "warning: these credentials expire at \(Rendering.iso8601(result.credentials.expiration)), within the expiry margin of \(common.expiryMargin) s; 'federate credentials' will report them expired unless given a smaller --expiry-margin"
            )
        }
    }

    /// Runs a federation call, mapping its error.
    static func run(
        root: String, _ body: () async throws(FederationError) -> FederationResult
    ) async throws(CLIFailure) -> FederationResult {
        do {
            return try await body()
        } catch {
            throw CLIFailure.federation(error, root: root)
        }
    }
}
