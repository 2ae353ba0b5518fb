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
import Foundation
import Logging

@main
struct OIDCFederation: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample-oidc",
        abstract: "Federate an OIDC or Google ID token (a JWT) into an identity ID and AWS credentials."
    )

    @Option(help: "The Cognito Identity endpoint, e.g. http://127.0.0.1:5000/ for moto. Omit for AWS.")
    var endpoint: String?

    @Option(help: "The identity pool ID, REGION:GUID.")
    var poolId: String

    @Option(help: "Who issued the token: 'google' or 'oidc:ISSUER' (the provider name configured on the pool).")
    var provider: String = "oidc:login.example.com"

    @Option(help: "A file holding the ID token (a JWT); a trailing newline is ignored.")
    var tokenFile: String?

    @Flag(help: "Generate an unsigned demo JWT instead of reading one (only useful against moto).")
    var demoToken = false

    @Option(help: "The session name, one per end user.")
    var session = "alice"

    @Option(help: "Credentials count as expired this many seconds early (moto issues 90 s credentials).")
    var expiryMargin: Double = 30

    @Flag(help: "Show the library's debug log (never secret) on stderr.")
    var verbose = false

    func validate() throws {
        guard (tokenFile != nil) != demoToken else {
            throw ValidationError("give exactly one of --token-file PATH or --demo-token")
        }
        guard let parsed = AuthProvider(identifier: provider), parsed.issuesJWT else {
            throw ValidationError("--provider must be 'google' or 'oidc:ISSUER' (a JWT-issuing provider)")
        }
    }

    func run() async throws {
        let provider = AuthProvider(identifier: self.provider)!  // checked in validate()

        print("1. Get the end user's ID token")
        let token: String
        if let tokenFile {
            token = try String(contentsOfFile: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            print("   read a \(token.utf8.count)-byte token from \(tokenFile) (not shown)")
        } else {
            let issuer = provider == .google ? "https://accounts.google.com" : "https://\(provider.loginsKey)"
            token = DemoJWT.make(subject: "\(session)-subject", issuer: issuer)
            print("   generated an unsigned demo JWT: iss=\(issuer), sub=\(session)-subject, valid 1 h (not shown)")
        }

        print("2. Create a client for pool \(poolId)")
        var logger = Logger(label: "sample-oidc", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = verbose ? .debug : .warning
        let client = try FederationClient(
            configuration: FederationConfiguration(
                identityPoolId: poolId,
                endpoint: endpoint,
                expiryMargin: .milliseconds(Int64(expiryMargin * 1000))
            ),
            logger: logger
        )

        print("3. Federate the token under logins key '\(provider.loginsKey)' for session '\(session)'")
        let result = try await client.federate(token: token, provider: provider, session: session)
        print("   identity ID:   \(result.identityId)")
        print("   access key ID: \(result.credentials.accessKeyId)")
        print("   expires:       \(result.credentials.expiration) (no automatic refresh: push a new token before then)")

        print("4. Read the session back")
        let snapshot = await client.session(session)
        print("   state: \(snapshot.state), provider: \(snapshot.provider?.identifier ?? "none"), identity ID: \(snapshot.identityId ?? "none")")
        print("   credentials: \(snapshot.credentials.map { "\($0)" } ?? "none")")  // redacted by AWSCredentials.description
        guard snapshot.state == .federated, snapshot.identityId == result.identityId else {
            throw ExitCode.failure
        }

        print("5. Clear the session")
        try await client.clear(session: session)
        let cleared = await client.session(session)
        print("   state: \(cleared.state)")
    }
}

/// Unsigned JWTs for demos against moto, which does not verify tokens. A real
/// identity provider signs its ID tokens; Cognito checks the signature.
enum DemoJWT {
    static func make(subject: String, issuer: String, lifetime: TimeInterval = 3600) -> String {
        let header = #"{"alg":"RS256","kid":"demo","typ":"JWT"}"#
        let expiry = Int(Date().timeIntervalSince1970 + lifetime)
        let payload = #"{"aud":"demo-client","exp":\#(expiry),"iss":"\#(issuer)","sub":"\#(subject)"}"#
        return [header, payload, "demo-signature-not-verified"].map(base64URL).joined(separator: ".")
    }

    private static func base64URL(_ text: String) -> String {
        Data(text.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
