import ArgumentParser
import Federation

/// `federate login --pool-id ID --provider P (--token-file PATH | --token-stdin) [--identity-id ID] [--role-arn ARN]
/// [--flow enhanced|classic] [--role-session-name NAME] [--duration SECONDS] [--policy-file PATH] [--sts-endpoint URL]`
struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Exchange a provider token for credentials and save them as the session.",
        discussion: """
            P is one of facebook, google, amazon, apple, twitter, oidc:ISSUER, saml:ARN, custom:KEY, developer. \
            JWT tokens (google, apple, oidc, developer without --identity-id) are checked locally first. \
            The token itself is never stored or printed. \
            --flow classic gets the identity's Cognito OpenID token and has STS assume --role-arn with it.
            """
    )

    @Option(name: .customLong("pool-id"), help: ArgumentHelp("The identity pool ID, REGION:GUID.", valueName: "ID"))
    var poolId: String

    @Option(name: .long, help: ArgumentHelp("Who issued the token.", valueName: "P"))
    var provider: String

    @Option(name: .customLong("token-file"), help: ArgumentHelp("Read the token from this file (trailing line breaks are ignored).", valueName: "PATH"))
    var tokenFile: String?

    @Flag(name: .customLong("token-stdin"), help: "Read the token from standard input.")
    var tokenStdin = false

    @Option(name: .customLong("identity-id"), help: ArgumentHelp("The identity ID your backend got (developer-authenticated flow).", valueName: "ID"))
    var identityId: String?

    @OptionGroup var flow: FlowOptions
    @OptionGroup var common: CommonOptions
    @OptionGroup var output: FormatOptions

    func validate() throws {
        try common.validateEndpoint()
        guard AuthProvider(identifier: provider) != nil else {
            throw ValidationError(
                "--provider '\(provider)' is not one of facebook, google, amazon, apple, twitter, oidc:ISSUER, saml:ARN, custom:KEY, developer"
                    + Self.providerHint(provider))
        }
        switch (tokenFile != nil, tokenStdin) {
        case (true, true): throw ValidationError("pass either --token-file or --token-stdin, not both")
        case (false, false): throw ValidationError("pass the provider token with --token-file PATH or --token-stdin")
        default: break
        }
        if let identityId, identityId.isEmpty { throw ValidationError("--identity-id must not be empty") }
        if let identityId, !FederationOptions.isIdentityIdShaped(identityId) {
            throw ValidationError(
                "--identity-id must be a Cognito identity ID: REGION:ID, letters, digits, _ and -, at most 55 characters, as us-east-1:0f1e2d3c-… (the one your backend got)")
        }
    }

    /// The likely slip in a `--provider` refused: a capital letter, or a kind without what
    /// follows its colon.
    static func providerHint(_ provider: String) -> String {
        let lower = provider.lowercased()
        if !provider.contains(":"), lower != provider, AuthProvider(identifier: lower) != nil { return " (did you mean '\(lower)'?)" }
        let kinds = ["oidc": "the issuer", "saml": "the provider's ARN", "custom": "the Logins key its token goes under"]
        if let after = kinds[lower] { return " (\(lower) takes \(after) after a colon: \(lower):…)" }
        return ""
    }

    func run() async throws(CLIFailure) {
        guard let provider = AuthProvider(identifier: provider) else { throw CLIFailure(.usage, "unknown --provider") }
        let configuration = try Exchange.configuration(common, poolId: poolId, flow: flow)
        let federationFlow = try flow.federationFlow()
        let token: String
        if let tokenFile {
            token = try TokenReader.contents(ofFile: tokenFile)
        } else {
            token = try TokenReader.readStandardInput()
        }
        Terminal.neverShow(token)
        let access = try KeystoreAccess(common)
        let client = try await access.client(configuration: configuration)
        let options = FederationOptions(
            developerProvidedIdentityId: identityId,
            customRoleArn: flow.flow == .enhanced ? flow.roleArn : nil,
            flow: federationFlow)
        let session = common.session
        let result = try await Exchange.run(root: access.root) { () async throws(FederationError) -> FederationResult in
            try await client.federate(token: token, provider: provider, options: options, session: session)
        }
        try Exchange.report(result, format: output.format, provider: provider.identifier, common: common)
    }
}
