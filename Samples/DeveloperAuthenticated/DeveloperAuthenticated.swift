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
import Logging

@main
struct DeveloperAuthenticated: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample-developer",
        abstract: "A backend mints a developer token; the client federates it with the developer-provided identity ID."
    )

    @Option(help: "The Cognito Identity endpoint, e.g. http://127.0.0.1:5000/ for moto. Omit for AWS.")
    var endpoint: String?

    @Option(help: "The identity pool ID, REGION:GUID.")
    var poolId: String

    @Option(help: "The pool's developer provider name (DeveloperProviderName).")
    var developerProvider = "login.mycompany"

    @Option(help: "Your backend's own ID for the user.")
    var userId = "user-42"

    @Option(help: "The session name, one per end user.")
    var session = "carol"

    @Option(help: "Credentials count as expired this many seconds early (moto issues 90 s credentials).")
    var expiryMargin: Double = 30

    @Flag(help: "Show the library's debug log (never secret) on stderr.")
    var verbose = false

    func run() async throws {
        var logger = Logger(label: "sample-developer", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = verbose ? .debug : .warning
        let configuration = FederationConfiguration(
            identityPoolId: poolId,
            endpoint: endpoint,
            expiryMargin: .milliseconds(Int64(expiryMargin * 1000))
        )

        print("1. Backend: GetOpenIdTokenForDeveloperIdentity for user '\(userId)' of '\(developerProvider)'")
        guard let developerCredentials = SigningCredentials.fromEnvironment(ProcessInfo.processInfo.environment) else {
            print("   the backend needs its AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (any values for moto)")
            throw ExitCode.failure
        }
        print("   signing with SigV4 as access key ID \(developerCredentials.accessKeyId)")
        let backend = try DeveloperIdentityIssuer(
            configuration: configuration,
            developerProviderName: developerProvider,
            credentials: developerCredentials,
            logger: logger
        )
        let minted = try await backend.openIdToken(forUser: userId)
        print("   identity ID: \(minted.identityId)")
        print("   token:       \(minted.token.utf8.count) bytes (not shown); the backend sends both to the client")

        print("2. Client: federate the token as .developer with developerProvidedIdentityId")
        let client = try FederationClient(configuration: configuration, logger: logger)
        let result = try await client.federate(
            token: minted.token,
            provider: .developer,  // logins key cognito-identity.amazonaws.com
            options: FederationOptions(developerProvidedIdentityId: minted.identityId),
            session: session
        )
        print("   identity ID:   \(result.identityId)")
        print("   access key ID: \(result.credentials.accessKeyId), expires \(result.credentials.expiration)")

        print("3. Read the session back")
        let snapshot = await client.session(session)
        print("   state: \(snapshot.state), provider: \(snapshot.provider?.identifier ?? "none"), identity ID: \(snapshot.identityId ?? "none")")
        guard result.identityId == minted.identityId, snapshot.state == .federated else {
            print("   the client's identity differs from the one the backend was given")
            throw ExitCode.failure
        }
        print("   the client holds credentials for exactly the identity the backend chose")
    }
}
