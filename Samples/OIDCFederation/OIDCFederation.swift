// sample-oidc: federate an OpenID Connect (or Google) ID token into a Cognito identity
// and temporary AWS credentials, the way Amplify's `federateToIdentityPool` does.
//
//   sample-oidc --endpoint http://127.0.0.1:5000/ --pool-id us-east-1:… \
//       --provider oidc:login.example.com --token-file id-token.jwt
//   sample-oidc --endpoint … --pool-id … --provider google --demo-token
//
// Prints each step; never a token, secret key or session token.

import ArgumentParser
import Federation
import SampleSupport

@main
struct OIDCFederation: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample-oidc",
        abstract: "Federate an OIDC or Google ID token (a JWT) into an identity ID and AWS credentials."
    )

    @OptionGroup var options: SampleOptions
    @OptionGroup var token: TokenOptions
    @OptionGroup var margin: ExpiryMarginOptions

    @Option(help: "Who issued the token: 'google' or 'oidc:ISSUER' (the provider name configured on the pool).")
    var provider: String = "oidc:login.example.com"

    @Option(help: "The session name, one per end user.")
    var session = "alice"

    func validate() throws {
        // The two kinds this sample shows; apple and developer tokens have flows of their own.
        switch AuthProvider(identifier: provider) {
        case .google?, .oidc?: break
        default: throw ValidationError("--provider must be 'google' or 'oidc:ISSUER'")
        }
    }

    func run() async throws {
        let provider = AuthProvider(identifier: self.provider)!  // checked in validate()
        var steps = StepPrinter()

        steps.next("Get the end user's ID token")
        let issuer = provider == .google ? "https://accounts.google.com" : "https://\(provider.loginsKey)"
        let idToken = try token.idToken(demoSubject: "\(session)-subject", demoIssuer: issuer, steps: steps)

        steps.next("Create a client for pool \(options.poolId)")
        let client = try FederationClient(
            configuration: options.configuration(expiryMargin: margin.expiryMargin),
            logger: options.logger(label: "sample-oidc")
        )

        steps.next("Federate the token under logins key '\(provider.loginsKey)' for session '\(session)'")
        let result = try await client.federate(token: idToken, provider: provider, session: session)
        steps.detail(result)
        steps.detail("no automatic refresh: push a new token before they expire")

        steps.next("Read the session back")
        let snapshot = try await client.session(session)
        steps.detail(snapshot)
        steps.detail("credentials: \(snapshot.credentials.map { "\($0)" } ?? "none")")  // redacted by AWSCredentials.description
        guard snapshot.state == .federated, snapshot.identityId == result.identityId else {
            steps.detail("expected the session federated with identity ID \(result.identityId); it reads otherwise")
            throw ExitCode.failure
        }

        steps.next("Clear the session")
        try await client.clear(session: session)
        let cleared = try await client.session(session)
        steps.detail("state: \(cleared.state)")
    }
}
