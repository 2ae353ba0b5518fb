// sample-guest: start an end user as a guest (an unauthenticated Cognito identity), then
// link a Google login to that same identity when the user signs in. The identity ID stays,
// so whatever the guest stored under it (S3 prefix, DynamoDB partition…) stays theirs.
//
//   sample-guest --endpoint http://127.0.0.1:5000/ --pool-id us-east-1:… --demo-token
//
// The pool must allow unauthenticated identities and list accounts.google.com.
// Prints each step; never a token, secret key or session token.

import ArgumentParser
import Federation
import Foundation
import Logging

@main
struct GuestThenLogin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample-guest",
        abstract: "Get a guest identity, then link a Google login to it and keep the identity ID."
    )

    @Option(help: "The Cognito Identity endpoint, e.g. http://127.0.0.1:5000/ for moto. Omit for AWS.")
    var endpoint: String?

    @Option(help: "The identity pool ID, REGION:GUID.")
    var poolId: String

    @Option(help: "A file holding the user's Google ID token (a JWT); a trailing newline is ignored.")
    var tokenFile: String?

    @Flag(help: "Generate an unsigned demo Google JWT instead of reading one (only useful against moto).")
    var demoToken = false

    @Option(help: "The session name, one per end user.")
    var session = "visitor"

    @Option(help: "Credentials count as expired this many seconds early (moto issues 90 s credentials).")
    var expiryMargin: Double = 30

    @Flag(help: "Show the library's debug log (never secret) on stderr.")
    var verbose = false

    func validate() throws {
        guard (tokenFile != nil) != demoToken else {
            throw ValidationError("give exactly one of --token-file PATH or --demo-token")
        }
    }

    func run() async throws {
        var logger = Logger(label: "sample-guest", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = verbose ? .debug : .warning
        let client = try FederationClient(
            configuration: FederationConfiguration(
                identityPoolId: poolId,
                endpoint: endpoint,
                expiryMargin: .milliseconds(Int64(expiryMargin * 1000))
            ),
            logger: logger
        )

        print("1. The user arrives signed out: get a guest identity for session '\(session)'")
        let guest = try await client.federateAsGuest(session: session)
        let asGuest = await client.session(session)
        print("   identity ID:   \(guest.identityId)")
        print("   access key ID: \(guest.credentials.accessKeyId), expires \(guest.credentials.expiration)")
        print("   state: \(asGuest.state), guest: \(asGuest.isGuest)")

        print("2. Asking again reuses the session's guest identity (no second GetId)")
        let again = try await client.federateAsGuest(session: session)
        print("   identity ID:   \(again.identityId) (\(again.identityId == guest.identityId ? "same" : "DIFFERENT"))")

        print("3. The user signs in with Google: federate the ID token into the same session")
        let token: String
        if let tokenFile {
            token = try String(contentsOfFile: tokenFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            print("   read a \(token.utf8.count)-byte token from \(tokenFile) (not shown)")
        } else {
            token = DemoJWT.make(subject: "google-\(session)", issuer: "https://accounts.google.com")
            print("   generated an unsigned demo Google JWT for sub=google-\(session) (not shown)")
        }
        // The session holds a guest identity, so the library sends its ID with the login:
        // GetCredentialsForIdentity links the login to that identity instead of creating one.
        let linked = try await client.federate(token: token, provider: .google, session: session)
        let signedIn = await client.session(session)
        print("   identity ID:   \(linked.identityId)")
        print("   access key ID: \(linked.credentials.accessKeyId), expires \(linked.credentials.expiration)")
        print("   state: \(signedIn.state), guest: \(signedIn.isGuest), provider: \(signedIn.provider?.identifier ?? "none")")

        guard linked.identityId == guest.identityId, again.identityId == guest.identityId else {
            print("   the identity ID changed: the login was not linked to the guest identity")
            throw ExitCode.failure
        }
        print("   the identity ID stayed the same: the Google login is now linked to the guest identity")
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
