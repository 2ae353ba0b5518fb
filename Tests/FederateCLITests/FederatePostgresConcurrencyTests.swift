import BrokerTestSupport
import Foundation
import Synchronization
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Many `federate` processes on one PostgreSQL keystore at once, and processes killed with
/// SIGKILL while they write: nothing lost, nothing duplicated, never a half-written session.
final class FederatePostgresConcurrencyTests: FederatePostgresTestCase {
    /// A canned Cognito that numbers its credentials: request n gets `ASIAGEN<n>`, a secret key
    /// and a session token that both name n, so a session read back can be checked whole.
    /// Each answer waits `delay()` first.
    private func numberedCognito(delay: @escaping @Sendable () -> Duration) throws -> LoopbackHTTPServer {
        let counter = RequestCounter()
        return try LoopbackHTTPServer { request in
            switch request.header("X-Amz-Target") {
            case "AWSCognitoIdentityService.GetId":
                return .json(#"{"IdentityId":"\#(FakeCognito.defaultIdentityId)"}"#).delayed(by: delay())
            default:
                let n = counter.value.wrappingAdd(1, ordering: .relaxed).newValue
                let expiration = Date().timeIntervalSince1970 + 3600
                return .json(
                    #"{"IdentityId":"\#(FakeCognito.defaultIdentityId)","Credentials":{"AccessKeyId":"ASIAGEN\#(n)","SecretKey":"\#(Self.secret(n))","SessionToken":"\#(Self.token(n))","Expiration":\#(expiration)}}"#
                ).delayed(by: delay())
            }
        }
    }

    private static func secret(_ n: Int) -> String { "GenSecretKey/\(n)/0123456789abcdefXYZ" }
    private static func token(_ n: Int) -> String { "GenSessionToken+\(n)+0123456789abcdefXYZ" }

    /// Reads `session` and checks it is one complete record: the secret and token of the same
    /// generation as its access key. Returns the generation.
    @discardableResult
    private func assertWhole(_ session: String, in harness: FederateHarness, file: StaticString = #filePath, line: UInt = #line) throws -> Int? {
        let run = try harness.run(["credentials", "--session", session, "--format", "json"], file: file, line: line)
        XCTAssertEqual(run.status, 0, "session \(session) is readable: \(run)", file: file, line: line)
        guard run.status == 0 else { return nil }
        let object = try Output.assertProcessShape(run.stdout, extraKeys: ["IdentityId", "Provider", "Session"], file: file, line: line)
        let accessKey = object["AccessKeyId"] as? String ?? ""
        guard accessKey.hasPrefix("ASIAGEN"), let n = Int(accessKey.dropFirst(7)) else {
            XCTFail("unexpected access key \(accessKey)", file: file, line: line)
            return nil
        }
        XCTAssertEqual(object["SecretAccessKey"] as? String, Self.secret(n), "session \(session): a whole record", file: file, line: line)
        XCTAssertEqual(object["SessionToken"] as? String, Self.token(n), "session \(session): a whole record", file: file, line: line)
        XCTAssertEqual(object["Session"] as? String, session, file: file, line: line)
        return n
    }

    private func itemCount() throws -> Int {
        Int(try sqlValue("SELECT count(*) FROM identity_broker_items WHERE service = 'identity-broker'")) ?? -1
    }

    /// 8 `federate login` processes at once, 5 sessions (three of them written by two
    /// processes): every process succeeds or fails with one clean line, every session is
    /// readable whole afterwards, one row per session.
    func testEightProcessesWritingAtOnce() throws {
        let cognito = try numberedCognito { .milliseconds(Int.random(in: 50...250)) }
        let sessions = ["s0", "s1", "s2", "s3", "s4", "s0", "s1", "s2"]
        let tokens = sessions.indices.map { TestJWT.valid(sub: "writer-\($0)") }
        harness.neverPrinted += tokens
        harness.notOnStderr += (0..<100).flatMap { [Self.secret($0), Self.token($0)] }
        for round in 0..<3 {
            let processes = try zip(sessions, tokens).map { session, token in
                try SpawnedFederate(harness, loginArguments(cognito, session: session), stdin: token)
            }
            var succeeded = Set<String>()
            for (process, session) in zip(processes, sessions) {
                let status = process.wait()
                XCTAssertNil(leakedRun(in: process.stderr, of: harness.neverPrinted + harness.notOnStderr), "round \(round): a secret on stderr")
                if status == 0 {
                    succeeded.insert(session)
                    try Output.assertProcessShape(process.stdout)
                } else {
                    XCTAssertEqual(process.stderr.filter { $0 == "\n" }.count, 1, "round \(round): a clean failure is one line: \(process.stderr)")
                    XCTAssertTrue(process.stderr.hasPrefix("federate: "), process.stderr)
                    XCTAssertEqual(process.stdout, "", "a failing login printed credentials")
                }
            }
            XCTAssertEqual(succeeded, Set(sessions), "round \(round): every login succeeded")
            for session in Set(sessions) { try assertWhole(session, in: harness) }
            XCTAssertEqual(try itemCount(), Set(sessions).count, "one row per session, no duplicate")
        }
        XCTAssertEqual(try sqlValue("SELECT count(*) FROM (SELECT key FROM identity_broker_items GROUP BY service, access_group, key HAVING count(*) > 1) d"), "0")
        try assertDumpHoldsNoSecret([Self.secret(1), Self.token(1), Self.secret(20), Self.token(20), key, server.password] + tokens)
    }

    /// `federate login` processes killed with SIGKILL at random points (the canned Cognito
    /// delays its answers, so kills land before, during and after the requests and the
    /// commit): every session is afterwards its previous whole record or a whole new one,
    /// and later commands work.
    func testKillNineDuringWrites() throws {
        let cognito = try numberedCognito { .milliseconds(Int.random(in: 0...150)) }
        let sessions = (0..<4).map { "k\($0)" }
        let token = TestJWT.valid(sub: "killed-writer")
        harness.neverPrinted.append(token)
        harness.notOnStderr += (0..<400).flatMap { [Self.secret($0), Self.token($0)] }
        // Every session starts with a good record.
        for session in sessions { try harness.expect(0, loginArguments(cognito, session: session), stdin: token) }
        var previous = [String: Int]()
        for session in sessions { previous[session] = try assertWhole(session, in: harness) }

        var killed = 0, finished = 0
        for round in 0..<12 {
            let processes = try (0..<6).map { index in
                try SpawnedFederate(harness, loginArguments(cognito, session: sessions[(round + index) % sessions.count]), stdin: token)
            }
            usleep(UInt32.random(in: 20_000...450_000))
            for process in processes where Bool.random() || round % 3 == 0 {
                process.kill9()
                usleep(UInt32.random(in: 0...40_000))
            }
            for process in processes {
                let status = process.wait()
                if status == 128 + SIGKILL { killed += 1 } else {
                    finished += 1
                    XCTAssertEqual(status, 0, "an unkilled login succeeded: \(process.stderr)")
                }
            }
            // Every session: whole, and the previous record or a newer one.
            for session in sessions {
                guard let n = try assertWhole(session, in: harness) else { continue }
                XCTAssertGreaterThanOrEqual(n, previous[session] ?? 0, "session \(session) went back to an older record")
                previous[session] = n
            }
        }
        XCTAssertGreaterThan(killed, 10, "kills landed")
        XCTAssertEqual(try itemCount(), sessions.count)
        // Later commands work: a login, status, clear.
        try harness.expect(0, loginArguments(cognito, session: "k0"), stdin: token)
        try assertWhole("k0", in: harness)
        XCTAssertEqual(try Output.jsonObject(try harness.expect(0, ["status", "--session", "k1"]).stdout)["state"] as? String, "federated")
        try harness.expect(0, ["clear", "--session", "k2"])
        try harness.expect(3, ["credentials", "--session", "k2"])
        // No connection is left behind by the killed processes once the server noticed.
        try assertDumpHoldsNoSecret([Self.secret(3), Self.token(3), Self.secret(30), Self.token(30), token, key, server.password])
        print("kill -9 during writes: \(killed) killed, \(finished) finished")
    }
}

/// The database stopped and started again under `federate` (its own server: the test stops it).
final class FederatePostgresOutageTests: FederatePostgresTestCase {
    func testUnreachableDatabaseExitsSixWithOneLineThenRecovers() throws {
        let cognito = try FakeCognito.served()
        let token = TestJWT.valid(sub: "outage-user")
        harness.neverPrinted.append(token)
        try harness.expect(0, loginArguments(cognito, session: "dora"), stdin: token)

        try server.stopServer()
        let started = Date()
        for arguments in [["credentials", "--session", "dora"], ["status", "--session", "dora"], ["clear", "--session", "dora"]] {
            let down = try harness.expect(6, arguments)
            XCTAssertTrue(down.stderr.contains("127.0.0.1:\(server.port)"), "names host:port: \(down.stderr)")
            XCTAssertTrue(down.stderr.contains("database"), "says it is the database: \(down.stderr)")
        }
        let login = try harness.expect(6, loginArguments(cognito, session: "dora"), stdin: token)
        XCTAssertTrue(login.stderr.contains("127.0.0.1:\(server.port)"), login.stderr)
        XCTAssertLessThan(Date().timeIntervalSince(started), 40, "failures come quickly")

        try server.startServer()
        let back = try harness.expect(0, ["credentials", "--session", "dora"])
        try Output.assertProcessShape(back.stdout)
    }
}

/// A shared counter a `@Sendable` handler can capture.
private final class RequestCounter: Sendable {
    let value = Atomic<Int>(0)
}
