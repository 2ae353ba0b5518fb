import BrokerTestSupport
import Federation
import Foundation
import SecureStorage
import XCTest

/// Two processes on one SQLite store: this test process holds a `FederationClient` on the
/// keystore `federate` uses, and `federate` subprocesses change sessions under it.
final class FederateSharedStoreTests: XCTestCase {
    private var harness: FederateHarness!

    override func setUpWithError() throws {
        harness = try FederateHarness()
        harness.notOnStderr = [FakeCognito.secretKey, FakeCognito.sessionToken]
    }

    override func tearDown() {
        harness?.cleanUp()
    }

    /// The keystore `federate` opens by default (private group, key file), opened here.
    private func sharedKeystore() throws -> SQLiteKeystore {
        try SQLiteKeystore(
            root: harness.keystore, service: "identity-broker",
            configuration: SQLiteKeystore.Configuration(changePollInterval: .milliseconds(25)))
    }

    private func loginArguments(_ cognito: FakeCognito, session: String) -> [String] {
        ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-stdin", "--endpoint", cognito.endpoint, "--session", session]
    }

    /// A login and a clear in another process reach this process's reads and streams.
    func testChangesMadeByAnotherProcessReachThisProcess() async throws {
        let cognito = try FakeCognito.served()
        let client = FederationClient(keystore: try sharedKeystore())
        let watchdog = streamWatchdog(client)
        defer { watchdog.cancel() }
        let updates = await client.stateUpdates(for: "alice")
        var states = updates.makeAsyncIterator()
        let initial = await states.next()
        XCTAssertEqual(initial, .notFederated)

        let token = TestJWT.valid()
        harness.neverPrinted.append(token)
        XCTAssertEqual(try harness.run(loginArguments(cognito, session: "alice"), stdin: token).status, 0)
        let federated = await states.next()
        XCTAssertEqual(federated, .federated, "the other process's login reached this process's stream")
        let credentials = try await client.credentials(for: "alice")
        XCTAssertEqual(credentials.accessKeyId, FakeCognito.accessKeyId)

        XCTAssertEqual(try harness.run(["clear", "--session", "alice"]).status, 0)
        let cleared = await states.next()
        XCTAssertEqual(cleared, .notFederated, "the other process's clear reached this process's stream")
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.state, .notFederated)
    }

    /// Two `federate login` processes race on one session; the service hands one of them
    /// credentials an hour longer. Whichever commits last, the store keeps the later one.
    /// Both processes read the session before either commits: a login that starts after another committed replaces it whatever its
    /// expiration (`testALaterFederationReplacesTheSessionEvenWhenItsCredentialsExpireSooner`).
    func testConcurrentLoginsInTwoProcessesConvergeOnTheLaterExpiration() async throws {
        for longerCommitsFirst in [true, false] {
            let now = Date().timeIntervalSince1970
            let long = TestJWT.make(sub: "long-lived-user", exp: Date().addingTimeInterval(3600), iss: "https://accounts.google.com")
            let short = TestJWT.valid(sub: "short-user")
            let cognito = try FakeCognito.served()
            cognito.setDefault(for: .getCredentialsForIdentity) { call in
                // The token in Logins says which process asks: the long one gets two hours.
                let isLong = call.bodyText.contains(long)
                let slow = isLong != longerCommitsFirst
                let reply = FakeCognito.Reply.credentials(
                    identityId: FakeCognito.defaultIdentityId, accessKeyId: isLong ? "ASIALONG" : "ASIASHORT",
                    expiration: Date(timeIntervalSince1970: now + (isLong ? 7200 : 3600)))
                return reply.delayed(by: .milliseconds(slow ? 1_200 : 600))
            }
            // Both processes have read the session (before their first request) once both
            // requests are in flight: the answers wait for that, then come in the order above.
            cognito.holdUntilInFlight(2, timeout: .seconds(20))
            let session = longerCommitsFirst ? "raced-a" : "raced-b"
            harness.neverPrinted += [long, short]
            let processes = try [long, short].map { token in
                try startFederate(loginArguments(cognito, session: session), stdin: token)
            }
            for process in processes {
                process.waitUntilExit()
                XCTAssertEqual(process.terminationStatus, 0)
            }
            let status = try harness.run(["credentials", "--session", session, "--format", "json"])
            XCTAssertEqual(status.status, 0, "\(status)")
            XCTAssertTrue(status.stdout.contains("ASIALONG"), "\(session): the later expiration won: \(status.stdout.prefix(60))")
        }
    }

    /// Starts `federate` with the harness's environment, `stdin` as its input; does not wait.
    private func startFederate(_ arguments: [String], stdin: String) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: harness.binary)
        process.arguments = arguments
        process.environment = harness.environment
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        input.fileHandleForWriting.write(Data((stdin + "\n").utf8))
        try input.fileHandleForWriting.close()
        return process
    }
}
