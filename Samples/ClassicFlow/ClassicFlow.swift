// sample-classic: the classic (basic) authflow. A Google login and a guest are federated
// with GetOpenIdToken and STS AssumeRoleWithWebIdentity, for a role the caller names and
// narrowed by a session policy and a duration, instead of Cognito's GetCredentialsForIdentity.
//
//   sample-classic --endpoint http://127.0.0.1:5000/ --sts-endpoint http://127.0.0.1:5000/ \
//       --pool-id us-east-1:… --role-arn arn:aws:iam::123456789012:role/Classic --demo-token
//
// The pool must have the classic flow enabled (AllowClassicFlow), list accounts.google.com
// and allow guests; the role must trust cognito-identity.amazonaws.com for this pool.
// Prints each step; never a token (the Cognito OpenID token included), secret key or session token.

import ArgumentParser
import Federation
import SampleSupport

@main
struct ClassicFlow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample-classic",
        abstract: "Federate a Google login and a guest through the classic flow: GetOpenIdToken, then STS AssumeRoleWithWebIdentity."
    )

    @OptionGroup var options: SampleOptions
    @OptionGroup var token: TokenOptions
    @OptionGroup var margin: ExpiryMarginOptions

    @Option(help: "The STS endpoint, e.g. http://127.0.0.1:5000/ for moto. Omit for AWS's regional one.")
    var stsEndpoint: String?

    @Option(help: "The IAM role STS assumes.")
    var roleArn: String

    @Option(help: "How long the credentials last, 900 to 43200 seconds.")
    var duration = 900

    @Option(help: "The session name, one per end user.")
    var session = "carol"

    func run() async throws {
        var configuration = options.configuration(expiryMargin: margin.expiryMargin)
        configuration.stsEndpoint = stsEndpoint
        let client = try FederationClient(configuration: configuration, logger: options.logger(label: "sample-classic"))
        var steps = StepPrinter()

        // A session policy narrows what the role allows for this one session.
        let policy = #"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:GetObject","Resource":"arn:aws:s3:::demo-bucket/*"}]}"#
        let classic = ClassicFlowOptions(roleArn: roleArn, durationSeconds: duration, sessionPolicy: policy)

        steps.next("Federate a Google ID token for session '\(session)' with the classic flow")
        let idToken = try token.idToken(demoSubject: "google-\(session)", demoIssuer: "https://accounts.google.com", steps: steps)
        let result = try await client.federate(
            token: idToken, provider: .google, options: FederationOptions(flow: .classic(classic)), session: session)
        steps.detail(result)
        steps.detail("role session name: \(RoleSessionName.derived(from: session)) (derived from the session name)")
        steps.detail("assumed role:      \(result.assumedRoleArn ?? "not reported")")
        steps.detail("subject the role saw: \(result.webIdentitySubject ?? "not reported by this STS")")
        let snapshot = try await client.session(session)
        steps.detail("state: \(snapshot.state); the session holds the STS credentials like any other")

        steps.next("A guest through the classic flow (the role must trust unauthenticated identities)")
        let guest = try await client.federateAsGuest(options: FederationOptions(flow: .classic(classic)), session: "\(session)-guest")
        steps.detail(guest)
        steps.detail("assumed role:      \(guest.assumedRoleArn ?? "not reported")")

        steps.next("Options STS would refuse are caught before anything is sent")
        do {
            let tooShort = ClassicFlowOptions(roleArn: roleArn, durationSeconds: 60)
            try await client.federateAsGuest(options: FederationOptions(flow: .classic(tooShort)), session: "\(session)-guest")
            steps.detail("a 60-second duration was accepted: unexpected")
            throw ExitCode.failure
        } catch let error as FederationError where error.code == .invalidConfiguration {
            steps.detail("60 seconds: \(error.code) (\(error.message))")
        }
    }
}
