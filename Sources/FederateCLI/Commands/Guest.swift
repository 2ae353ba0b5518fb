import ArgumentParser
import Federation

/// `federate guest --pool-id ID [--flow enhanced|classic --role-arn ARN [--role-session-name NAME] [--duration SECONDS] [--policy-file PATH] [--sts-endpoint URL]]`
struct Guest: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Get credentials for an unauthenticated (guest) identity and save them as the session.",
        discussion: """
            A later 'federate login' of the same session links the login to this identity. \
            --flow classic has STS assume --role-arn (which must trust unauthenticated identities) with the guest's Cognito OpenID token.
            """
    )

    @Option(name: .customLong("pool-id"), help: ArgumentHelp("The identity pool ID, REGION:GUID.", valueName: "ID"))
    var poolId: String

    @OptionGroup var flow: FlowOptions
    @OptionGroup var common: CommonOptions
    @OptionGroup var output: FormatOptions

    func validate() throws {
        try common.validateEndpoint()
        if flow.flow == .enhanced, flow.roleArn != nil {
            throw ValidationError("--role-arn applies to guest only with --flow classic (a guest has no token to choose a role with)")
        }
    }

    func run() async throws(CLIFailure) {
        let configuration = try Exchange.configuration(common, poolId: poolId, flow: flow)
        let options = FederationOptions(flow: try flow.federationFlow())
        let access = try KeystoreAccess(common)
        let client = try await access.client(configuration: configuration)
        let session = common.session
        let result = try await Exchange.run(root: access.root) { () async throws(FederationError) -> FederationResult in
            try await client.federateAsGuest(options: options, session: session)
        }
        try Exchange.report(result, format: output.format, provider: "guest", common: common)
    }
}
