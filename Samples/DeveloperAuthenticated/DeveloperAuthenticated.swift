// sample-developer: the developer-authenticated identities flow, in its two halves.
//
//   1. Your backend, which authenticated the user itself, asks Cognito for an OpenID token
//      with GetOpenIdTokenForDeveloperIdentity, naming the user under your developer
//      provider name. The call is SigV4-signed with the backend's own (developer) AWS
//      credentials, which never leave the backend. It gets back {IdentityId, Token} and
//      hands both to the client. `DeveloperIdentityIssuer` is that backend half.
//   2. The client federates that token as `.developer`, passing the identity ID as
//      `developerProvidedIdentityId`, so the library skips GetId (a developer token must
//      never go to GetId) and calls GetCredentialsForIdentity directly.
//
//   AWS_ACCESS_KEY_ID=… AWS_SECRET_ACCESS_KEY=… sample-developer \
//       --endpoint http://127.0.0.1:5000/ --pool-id us-east-1:… \
//       --developer-provider login.mycompany --user-id user-42
//
// The pool's DeveloperProviderName must equal --developer-provider. Against moto any
// signing credentials do (moto checks no signature); against AWS they need permission for
// cognito-identity:GetOpenIdTokenForDeveloperIdentity on the pool.
// Prints each step; never a token, secret key or session token.

import ArgumentParser
import Federation
import Foundation
import SampleSupport

@main
struct DeveloperAuthenticated: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample-developer",
        abstract: "A backend mints a developer token; the client federates it with the developer-provided identity ID."
    )

    @OptionGroup var options: SampleOptions
    @OptionGroup var margin: ExpiryMarginOptions

    @Option(help: "The pool's developer provider name (DeveloperProviderName).")
    var developerProvider = "login.mycompany"

    @Option(help: "Your backend's own ID for the user.")
    var userId = "user-42"

    @Option(help: "The session name, one per end user.")
    var session = "carol"

    func run() async throws {
        let logger = options.logger(label: "sample-developer")
        let configuration = options.configuration(expiryMargin: margin.expiryMargin)
        var steps = StepPrinter()

        steps.next("Backend: GetOpenIdTokenForDeveloperIdentity for user '\(userId)' of '\(developerProvider)'")
        guard let developerCredentials = SigningCredentials.fromEnvironment(ProcessInfo.processInfo.environment) else {
            steps.detail("the backend needs its AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (any values for moto)")
            throw ExitCode.failure
        }
        steps.detail("signing with SigV4 as access key ID \(developerCredentials.accessKeyId)")
        let backend = try DeveloperIdentityIssuer(
            configuration: configuration,
            developerProviderName: developerProvider,
            credentials: developerCredentials,
            logger: logger
        )
        let minted = try await backend.openIdToken(forUser: userId)
        steps.detail("identity ID: \(minted.identityId)")
        steps.detail("token:       \(minted.token.utf8.count) bytes (not shown); the backend sends both to the client")

        steps.next("Client: federate the token as .developer with developerProvidedIdentityId")
        let client = try FederationClient(configuration: configuration, logger: logger)
        let result = try await client.federate(
            token: minted.token,
            provider: .developer,  // logins key cognito-identity.amazonaws.com
            options: FederationOptions(developerProvidedIdentityId: minted.identityId),
            session: session
        )
        steps.detail(result)

        steps.next("Read the session back")
        let snapshot = try await client.session(session)
        steps.detail(snapshot)
        guard result.identityId == minted.identityId, snapshot.state == .federated else {
            steps.detail("the client's identity differs from the one the backend was given")
            throw ExitCode.failure
        }
        steps.detail("the client holds credentials for exactly the identity the backend chose")
    }
}
