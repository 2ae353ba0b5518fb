// sample-jobs: a job runner that runs one child process per end user, each getting its
// user's AWS credentials from a credential server, the way the AWS SDKs' container
// credential provider fetches them (and fetches again before they expire).
//
// Federates two end users (alice and bob) into one client, through the classic flow so
// that each gets a role session named after them; serves both sessions on 127.0.0.1, each
// behind its own random bearer token; then starts one Python (boto3) child per user with
// AWS_CONTAINER_CREDENTIALS_FULL_URI and AWS_CONTAINER_AUTHORIZATION_TOKEN set and any
// AWS_ACCESS_KEY_ID/… removed. Each child asks STS who it is (GetCallerIdentity) and prints
// it; the runner checks each acts as its own user. A token pushed later (federate again)
// is what the children's next fetch gets: no restart, no refresh by the library.
//
//   sample-jobs --endpoint http://127.0.0.1:5000/ --sts-endpoint http://127.0.0.1:5000/ \
//       --pool-id us-east-1:… --role-arn arn:aws:iam::123456789012:role/Jobs
//
// Needs python3 with boto3. Prints each step; never a secret key, session token or bearer token.

import ArgumentParser
import CredentialServer
import Federation
import Foundation
import SampleSupport

@main
struct JobRunner: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample-jobs",
        abstract: "Run one child process per end user on credentials served by a credential server."
    )

    @OptionGroup var options: SampleOptions
    @OptionGroup var margin: ExpiryMarginOptions

    @Option(help: "The role the jobs assume (classic flow); its role session is named after the user.")
    var roleArn = "arn:aws:iam::123456789012:role/Jobs"

    @Option(help: "The STS endpoint for the classic flow and for the jobs' GetCallerIdentity; default: --endpoint, else https://sts.us-east-1.amazonaws.com/.")
    var stsEndpoint: String?

    @Option(help: "The Python interpreter the jobs run with (boto3 required).")
    var python = "python3"

    /// What each job runs: boto3 resolves credentials through the container provider only
    /// (the environment carries no keys), then asks STS who it is.
    static let jobScript = """
        import boto3, os, sys
        session = boto3.Session(region_name="us-east-1")
        credentials = session.get_credentials()
        if credentials is None:
            sys.exit("no credentials")
        sts = session.client("sts", endpoint_url=os.environ["JOB_STS_ENDPOINT"])
        arn = sts.get_caller_identity()["Arn"]
        print(f"job for {os.environ['JOB_USER']}: acting as {arn} (credentials from {credentials.method})")
        """

    func run() async throws {
        var steps = StepPrinter()
        let users = ["alice", "bob"]

        steps.next("Create one client for pool \(options.poolId)")
        var configuration = options.configuration(expiryMargin: margin.expiryMargin)
        let stsEndpoint = self.stsEndpoint ?? options.endpoint ?? "https://sts.us-east-1.amazonaws.com/"
        configuration.stsEndpoint = stsEndpoint
        let client = try FederationClient(configuration: configuration, logger: options.logger(label: "sample-jobs"))

        let classic = FederationOptions(flow: .classic(ClassicFlowOptions(roleArn: roleArn)))
        for user in users {
            steps.next("Federate \(user)'s ID token into session '\(user)' (classic flow, role session '\(user)')")
            let token = DemoJWT.make(subject: "\(user)-subject", issuer: "https://accounts.google.com")
            let result = try await client.federate(token: token, provider: .google, options: classic, session: user)
            steps.detail(result)
        }

        steps.next("Serve both sessions on 127.0.0.1 (each behind its own random 256-bit token: one child cannot read the other's session)")
        let server = try CredentialServer(
            client: client, configuration: CredentialServerConfiguration(sessions: users),
            logger: options.logger(label: "sample-jobs.server"))
        let serving = Task { try await server.run() }
        defer { serving.cancel() }
        for user in users {
            steps.detail("\(user): \(try await server.endpoint(for: user).url)")
        }

        var failed = false
        for user in users {
            steps.next("Run \(user)'s job with the container-credential variables (and no AWS keys)")
            let endpoint = try await server.endpoint(for: user)
            var environment = endpoint.childEnvironment(from: ProcessInfo.processInfo.environment)
            environment["JOB_USER"] = user
            environment["JOB_STS_ENDPOINT"] = stsEndpoint
            let output: String
            do {
                output = try await runJob(environment: environment)
            } catch {
                // Recorded, not thrown: the other job still runs, and the server and sessions
                // are still cleaned up.
                steps.detail("\(user)'s job failed: \(error)")
                failed = true
                continue
            }
            steps.detail(output.trimmingCharacters(in: .whitespacesAndNewlines))
            if output.contains("/\(user) ") {
                steps.detail("\(user)'s job acted as \(user)")
            } else {
                steps.detail("\(user)'s job did not act as \(user)")
                failed = true
            }
        }

        steps.next("Stop the server and clear the sessions")
        await server.shutdown()
        try await serving.value
        for user in users { try await client.clear(session: user) }
        await client.shutdown()
        if failed { throw ExitCode.failure }
    }

    /// Runs the job script with `environment` on a thread of its own (waiting for a process
    /// must not hold a cooperative thread: the server answering the job needs one); returns
    /// its standard output.
    private func runJob(environment: [String: String]) async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try runJobBlocking(environment: environment) })
            }
        }
    }

    private func runJobBlocking(environment: [String: String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [python, "-c", Self.jobScript]
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw JobFailure(status: process.terminationStatus)
        }
        return String(decoding: data, as: UTF8.self)
    }
}

/// A job that exited with a status other than 0.
struct JobFailure: Error, CustomStringConvertible {
    let status: Int32
    var description: String { "the job exited with status \(status)" }
}
