import ArgumentParser
import Federation

/// `federate guest --pool-id ID`
struct Guest: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Get credentials for an unauthenticated (guest) identity and save them as the session.",
        discussion: "A later 'federate login' of the same session links the login to this identity."
    )

    @Option(name: .customLong("pool-id"), help: ArgumentHelp("The identity pool ID, REGION:GUID.", valueName: "ID"))
    var poolId: String

    @OptionGroup var common: CommonOptions
    @OptionGroup var output: FormatOptions

    func run() async throws(CLIFailure) {
        let access = try KeystoreAccess(common)
        let client = try access.client(configuration: Exchange.configuration(common, poolId: poolId))
        let session = common.session
        let result = try await Exchange.run(root: access.root) { () async throws(FederationError) -> FederationResult in
            try await client.federateAsGuest(session: session)
        }
        try Exchange.report(result, format: output.format, provider: "guest", common: common)
    }
}
