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
import SampleSupport

@main
struct GuestThenLogin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample-guest",
        abstract: "Get a guest identity, then link a Google login to it and keep the identity ID."
    )

    @OptionGroup var options: SampleOptions
    @OptionGroup var token: TokenOptions
    @OptionGroup var margin: ExpiryMarginOptions

    @Option(help: "The session name, one per end user.")
    var session = "visitor"

    func run() async throws {
        let client = try FederationClient(
            configuration: options.configuration(expiryMargin: margin.expiryMargin),
            logger: options.logger(label: "sample-guest")
        )
        var steps = StepPrinter()

        steps.next("The user arrives signed out: get a guest identity for session '\(session)'")
        let guest = try await client.federateAsGuest(session: session)
        let asGuest = try await client.session(session)
        steps.detail(guest)
        steps.detail("state: \(asGuest.state), guest: \(asGuest.isGuest)")

        steps.next("Asking again reuses the session's guest identity (no second GetId)")
        let again = try await client.federateAsGuest(session: session)
        steps.detail("identity ID:   \(again.identityId) (\(again.identityId == guest.identityId ? "same" : "DIFFERENT"))")

        steps.next("The user signs in with Google: federate the ID token into the same session")
        let idToken = try token.idToken(demoSubject: "google-\(session)", demoIssuer: "https://accounts.google.com", steps: steps)
        // The session holds a guest identity, so the library sends its ID with the login:
        // GetCredentialsForIdentity links the login to that identity instead of creating one.
        let linked = try await client.federate(token: idToken, provider: .google, session: session)
        let signedIn = try await client.session(session)
        steps.detail(linked)
        steps.detail("state: \(signedIn.state), guest: \(signedIn.isGuest), provider: \(signedIn.provider?.identifier ?? "none")")

        guard linked.identityId == guest.identityId, again.identityId == guest.identityId else {
            steps.detail("the identity ID changed: the login was not linked to the guest identity")
            throw ExitCode.failure
        }
        steps.detail("the identity ID stayed the same: the Google login is now linked to the guest identity")
    }
}
