import BrokerTestSupport
@testable import CredentialServer
@testable import Federation
import Foundation
import InMemoryLogging
import Logging
import SecureStorage
import Synchronization
import XCTest
#if canImport(Glibc)
import Glibc
#endif

/// The server against real HTTP over loopback (libcurl as the client), with sessions
/// federated through a fake Cognito into real keystores.
final class CredentialServerTests: XCTestCase {
    private let fake = FakeCognito(expiration: Date().addingTimeInterval(3600))

    /// A server for session "alice", federated, with a 30 s idle timeout (so that a
    /// connection the server keeps is still open when a test looks).
    private func servingAlice(idleTimeout: Duration = .seconds(30)) async throws -> RunningServer {
        let client = try federatingClient(fake, keystore: InMemoryKeystore())
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        var configuration = CredentialServerConfiguration(session: "alice")
        configuration.idleTimeout = idleTimeout
        return RunningServer(try CredentialServer(client: client, configuration: configuration))
    }

    private func start(_ client: FederationClient, sessions: [String] = ["alice"], logger: Logger? = nil) throws -> RunningServer {
        RunningServer(try CredentialServer(client: client, configuration: CredentialServerConfiguration(sessions: sessions), logger: logger))
    }

    // MARK: Serving

    func testServesTheSessionAsContainerCredentialsJSON() async throws {
        let client = try federatingClient(fake, keystore: InMemoryKeystore())
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let running = try start(client)
        let endpoint = try await running.server.endpoint(for: "alice")
        XCTAssertTrue(endpoint.url.hasPrefix("http://127.0.0.1:"), endpoint.url)
        XCTAssertTrue(endpoint.url.hasSuffix("/credentials/alice"), endpoint.url)
        // Bound to 127.0.0.1 itself: another loopback address (which a socket bound to every
        // address, 0.0.0.0 or a dual-stack ::, would accept) is refused.
        let port = try await running.port()
        XCTAssertTrue(canConnect(to: "127.0.0.1", port: port))
        XCTAssertFalse(canConnect(to: "127.0.0.2", port: port), "the server listens beyond 127.0.0.1")

        let answer = try await running.request("/credentials/alice")
        XCTAssertEqual(answer.status, 200, answer.body)
        XCTAssertEqual(answer.header("Content-Type"), "application/json")
        XCTAssertEqual(answer.header("Cache-Control"), "no-store")
        let object = answer.json
        XCTAssertEqual(Set(object.keys), ["AccessKeyId", "SecretAccessKey", "Token", "Expiration"])
        XCTAssertEqual(object["AccessKeyId"] as? String, FakeCognito.accessKeyId)
        XCTAssertEqual(object["SecretAccessKey"] as? String, FakeCognito.secretKey)
        XCTAssertEqual(object["Token"] as? String, FakeCognito.sessionToken)
        let expiration = try XCTUnwrap(object["Expiration"] as? String)
        XCTAssertNotNil(expiration.range(of: #"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"#, options: .regularExpression), expiration)
        let stored = try await client.credentials(for: "alice").expiration
        let formatter = ISO8601DateFormatter()
        XCTAssertEqual(formatter.date(from: expiration)?.timeIntervalSince1970, stored.timeIntervalSince1970.rounded(.down))

        // The SDKs send the token as is; `Bearer <token>` is accepted too.
        let bearer = try await running.request("/credentials/alice", authorization: "Bearer " + running.token().value)
        XCTAssertEqual(bearer.status, 200)
        try await running.stop()
    }

    func testServesSeveralSessionsEachAtItsPath() async throws {
        let client = try federatingClient(fake, keystore: InMemoryKeystore())
        try await client.federate(token: TestJWT.valid(sub: "a"), provider: .google, session: "alice")
        fake.setDefault(.credentials(identityId: FakeCognito.defaultIdentityId, accessKeyId: "ASIABOBACCESSKEY00001", expiration: Date().addingTimeInterval(3600)), for: .getCredentialsForIdentity)
        try await client.federate(token: TestJWT.valid(sub: "b"), provider: .google, session: "bob@example.com")
        let running = try start(client, sessions: ["alice", "bob@example.com"])
        let alice = try await running.request("/credentials/alice")
        let bob = try await running.request("/credentials/bob@example.com")
        XCTAssertEqual(alice.json["AccessKeyId"] as? String, FakeCognito.accessKeyId)
        XCTAssertEqual(bob.json["AccessKeyId"] as? String, "ASIABOBACCESSKEY00001")
        let bobEndpoint = try await running.server.endpoint(for: "bob@example.com")
        XCTAssertTrue(bobEndpoint.url.hasSuffix("/credentials/bob@example.com"))
        XCTAssertEqual(bobEndpoint.authorizationToken.value, try running.server.authorizationToken(for: "bob@example.com").value)
        do {
            _ = try await running.server.endpoint(for: "carol")
            XCTFail("carol is not served")
        } catch {
            XCTAssertEqual(error.code, .sessionNotServed)
        }
        XCTAssertThrowsError(try running.server.authorizationToken(for: "carol")) { error in
            XCTAssertEqual((error as? CredentialServerError)?.code, .sessionNotServed)
        }
        try await running.stop()
    }

    /// One server for one child per user (the job-runner sample): a child holds its own
    /// session's token, which reads no other session and does not tell whether another is
    /// served (before, one token served every session).
    func testASessionsTokenReadsThatSessionAndNoOther() async throws {
        let client = try federatingClient(fake, keystore: InMemoryKeystore())
        try await client.federate(token: TestJWT.valid(sub: "a"), provider: .google, session: "alice")
        fake.setDefault(.credentials(identityId: FakeCognito.defaultIdentityId, accessKeyId: "ASIABOBACCESSKEY00001", expiration: Date().addingTimeInterval(3600)), for: .getCredentialsForIdentity)
        try await client.federate(token: TestJWT.valid(sub: "b"), provider: .google, session: "bob")
        let running = try start(client, sessions: ["alice", "bob"])
        let alice = try await running.server.endpoint(for: "alice").authorizationToken.value
        let bob = try await running.server.endpoint(for: "bob").authorizationToken.value
        XCTAssertNotEqual(alice, bob)

        let own = try await running.request("/credentials/bob", authorization: bob)
        XCTAssertEqual(own.json["AccessKeyId"] as? String, "ASIABOBACCESSKEY00001")
        let cases: [(String, String, String, Int)] = [
            ("alice's token, bob's path", alice, "/credentials/bob", 404),
            ("alice's token as a bearer, bob's path", "Bearer " + alice, "/credentials/bob", 404),
            ("bob's token, alice's path", bob, "/credentials/alice", 404),
            ("alice's token, a path nobody is served at", alice, "/credentials/carol", 404),
            ("alice's token, another path", alice, "/", 404),
        ]
        var bodies: Set<String> = []
        for (name, token, path, status) in cases {
            let answer = try await running.request(path, authorization: token)
            XCTAssertEqual(answer.status, status, name)
            XCTAssertEqual(answer.json["code"] as? String, "NotFound", name)
            XCTAssertNil(leakedRun(in: answer.body, of: [FakeCognito.secretKey, FakeCognito.sessionToken, alice, bob]), "\(name): \(answer.body)")
            XCTAssertFalse(answer.body.contains("ASIA"), "\(name): \(answer.body)")
            XCTAssertEqual(answer.header("Connection"), "close", name)
            bodies.insert(answer.body)
        }
        XCTAssertEqual(bodies.count, 1, "a served session and none read the same: \(bodies)")
        // Without a served session's token, a served session's path and any other read the same.
        var refusals: Set<String> = []
        for path in ["/credentials/bob", "/credentials/alice", "/credentials/carol", "/"] {
            let neither = try await running.request(path, authorization: String(alice.reversed()))
            XCTAssertEqual(neither.status, 403, path)
            refusals.insert(neither.body)
        }
        XCTAssertEqual(refusals.count, 1, "a refusal told served paths apart: \(refusals)")
        try await running.stop()
    }

    // MARK: Refusing

    func testMissingOrWrongTokenIsRefusedWithNothingElse() async throws {
        let client = try federatingClient(fake, keystore: InMemoryKeystore())
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let running = try start(client)
        let token = try running.token().value
        var wrong = Array(token)
        wrong[wrong.count - 1] = wrong.last == "0" ? "1" : "0"
        let cases: [(String, String??, Int)] = [
            ("missing", .none, 401),
            ("empty", .some(""), 403),
            ("wrong last character", .some(String(wrong)), 403),
            ("prefix", .some(String(token.prefix(63))), 403),
            ("longer", .some(token + "0"), 403),
            ("upper case", .some(token.uppercased()), 403),
            ("bearer of another", .some("Bearer " + String(wrong)), 403),
        ]
        for (name, authorization, status) in cases {
            for path in ["/credentials/alice", "/credentials/nobody", "/"] {
                let answer = try await running.request(path, authorization: authorization)
                XCTAssertEqual(answer.status, status, "\(name) \(path)")
                XCTAssertEqual(answer.json["code"] as? String, status == 401 ? "Unauthorized" : "Forbidden", "\(name) \(path)")
                XCTAssertFalse((answer.json["message"] as? String ?? "").isEmpty, "\(name) \(path)")
                XCTAssertNil(leakedRun(in: answer.body, of: [FakeCognito.secretKey, FakeCognito.sessionToken, token]), "\(name): \(answer.body)")
                XCTAssertFalse(answer.body.contains(FakeCognito.accessKeyId), name)
                XCTAssertFalse(answer.body.contains("alice"), "no hint of what is served: \(answer.body)")
                for (_, value) in answer.headers {
                    XCTAssertNil(leakedRun(in: value, of: [token]), name)
                }
            }
        }
        try await running.stop()
    }

    func testNoValidCredentialsIsAnErrorNeverOldCredentials() async throws {
        let keystore = InMemoryKeystore()
        let client = try federatingClient(fake, keystore: keystore, margin: .seconds(120))
        let running = try start(client, sessions: ["never", "expired", "cleared"])

        // Never federated.
        var answer = try await running.request("/credentials/never")
        XCTAssertEqual(answer.status, 404)
        XCTAssertEqual(answer.json["code"] as? String, "NoValidCredentials")
        XCTAssertNotNil(answer.json["message"] as? String)

        // Expired: credentials inside the expiry margin.
        fake.setDefault(.credentials(identityId: FakeCognito.defaultIdentityId, expiration: Date().addingTimeInterval(60)), for: .getCredentialsForIdentity)
        try await client.federate(token: TestJWT.valid(sub: "e"), provider: .google, session: "expired")
        answer = try await running.request("/credentials/expired")
        XCTAssertEqual(answer.status, 404, answer.body)
        XCTAssertEqual(answer.json["code"] as? String, "NoValidCredentials")
        XCTAssertNil(leakedRun(in: answer.body, of: [FakeCognito.secretKey, FakeCognito.sessionToken]))

        // Cleared after being served.
        fake.setDefault(.credentials(identityId: FakeCognito.defaultIdentityId, expiration: Date().addingTimeInterval(3600)), for: .getCredentialsForIdentity)
        try await client.federate(token: TestJWT.valid(sub: "c"), provider: .google, session: "cleared")
        answer = try await running.request("/credentials/cleared")
        XCTAssertEqual(answer.status, 200)
        try await client.clear(session: "cleared")
        answer = try await running.request("/credentials/cleared")
        XCTAssertEqual(answer.status, 404)
        XCTAssertEqual(answer.json["code"] as? String, "NoValidCredentials")
        XCTAssertNil(leakedRun(in: answer.body, of: [FakeCognito.secretKey, FakeCognito.sessionToken]))
        try await running.stop()
    }

    /// With no expiry margin, credentials in their last second are not served: `Expiration`
    /// goes out rounded down to the second, and would already have passed.
    func testCredentialsInTheirLastSecondAreNotServed() async throws {
        let base = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let clock = TestClock(base)
        let client = try federatingClient(fake, keystore: InMemoryKeystore(), margin: .zero, now: clock.function)
        let running = try start(client)
        fake.setDefault(
            .credentials(identityId: FakeCognito.defaultIdentityId, expiration: base.addingTimeInterval(5.6)), for: .getCredentialsForIdentity)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let served = try await running.request("/credentials/alice")
        XCTAssertEqual(served.status, 200, served.body)
        // Past the whole second of the expiration, before the expiration itself: the client
        // still holds valid credentials, but the `Expiration` sent (…:05) would have passed.
        clock.set(base.addingTimeInterval(5.15))
        let valid = try await client.credentials(for: "alice")
        XCTAssertEqual(valid.expiration.timeIntervalSince(base), 5.6, accuracy: 0.01, "the session itself is still valid")
        let last = try await running.request("/credentials/alice")
        XCTAssertEqual(last.status, 404, "served credentials whose Expiration had passed: \(last.body)")
        XCTAssertNil(leakedRun(in: last.body, of: [FakeCognito.secretKey, FakeCognito.sessionToken]))
        try await running.stop()
    }

    /// A saved item that stopped opening (tampered, sealed with another key) is what the
    /// session is now: an error, never the credentials the client had cached.
    func testADamagedSavedItemIsAnErrorNeverTheCachedCredentials() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("credential-server-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let keystore = try SQLiteKeystore(root: root, service: "credential-server-tests", keySource: .raw([UInt8](repeating: 4, count: 32)))
        defer { keystore.close() }
        let client = try federatingClient(fake, keystore: keystore)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let running = try start(client, sessions: ["alice"])
        var answer = try await running.request("/credentials/alice")
        XCTAssertEqual(answer.status, 200)

        try keystore.replaceStoredRow(sealing: Array("planted".utf8), withKey: [UInt8](repeating: 9, count: 32), forKey: "session.alice")
        answer = try await running.request("/credentials/alice")
        XCTAssertEqual(answer.status, 503, answer.body)
        XCTAssertEqual(answer.json["code"] as? String, "KeystoreUnavailable")
        XCTAssertNil(leakedRun(in: answer.body, of: [FakeCognito.secretKey, FakeCognito.sessionToken]))
        try await running.stop()
    }

    func testTerminatedIdentityIsGone() async throws {
        let client = try federatingClient(fake, keystore: InMemoryKeystore())
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        // Gone even after the retry through GetId.
        fake.setDefault(.error("ResourceNotFoundException", message: "Identity not found.", status: 400), for: .getCredentialsForIdentity)
        _ = try? await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let snapshot = try await client.session("alice")
        XCTAssertEqual(snapshot.state, .terminated)
        let running = try start(client)
        let answer = try await running.request("/credentials/alice")
        XCTAssertEqual(answer.status, 410)
        XCTAssertEqual(answer.json["code"] as? String, "IdentityTerminated")
        XCTAssertNil(leakedRun(in: answer.body, of: [FakeCognito.secretKey, FakeCognito.sessionToken]))
        try await running.stop()
    }

    func testOnlyGetOnServedPaths() async throws {
        let client = try federatingClient(fake, keystore: InMemoryKeystore())
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let running = try start(client)
        for path in ["/", "/credentials", "/credentials/", "/credentials/bob", "/credentials/alice/x", "/credentials/%61lice", "/CREDENTIALS/alice"] {
            let answer = try await running.request(path)
            XCTAssertEqual(answer.status, 404, path)
            XCTAssertEqual(answer.json["code"] as? String, "NotFound", path)
        }
        for method in ["POST", "PUT", "DELETE"] {
            let answer = try await running.request("/credentials/alice", method: method)
            XCTAssertEqual(answer.status, 405, method)
            XCTAssertEqual(answer.header("Allow"), "GET")
            XCTAssertEqual(answer.json["code"] as? String, "MethodNotAllowed", method)
            XCTAssertNil(leakedRun(in: answer.body, of: [FakeCognito.secretKey, FakeCognito.sessionToken]), method)
        }
        let query = try await running.request("/credentials/alice?x=1")
        XCTAssertEqual(query.status, 200, "a query string does not change the path")
        try await running.stop()
    }

    // MARK: The store is the source of truth

    /// Two SQLite keystore instances on one directory stand for two processes: a session
    /// federated through the other one after the server started is served by the next
    /// request, without waiting for this instance's change feed (polling set to an hour).
    func testSessionFederatedElsewhereIsServedAtOnce() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("credential-server-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let slowFeed = SQLiteKeystore.Configuration(changePollInterval: .seconds(3600))
        let here = try SQLiteKeystore(root: root, service: "cs-test", keySource: .keyFile, configuration: slowFeed)
        let elsewhere = try SQLiteKeystore(root: root, service: "cs-test", keySource: .keyFile, configuration: slowFeed)

        let reader = FederationClient(keystore: here)
        let running = try start(reader)
        var answer = try await running.request("/credentials/alice")
        XCTAssertEqual(answer.status, 404, "not federated yet")

        let other = try federatingClient(fake, keystore: elsewhere)
        try await other.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        answer = try await running.request("/credentials/alice")
        XCTAssertEqual(answer.status, 200, answer.body)
        XCTAssertEqual(answer.json["AccessKeyId"] as? String, FakeCognito.accessKeyId)

        // A new token pushed elsewhere replaces what is served, at the next request.
        fake.setDefault(.credentials(identityId: FakeCognito.defaultIdentityId, accessKeyId: "ASIASECONDLOGIN000001", expiration: Date().addingTimeInterval(7200)), for: .getCredentialsForIdentity)
        try await other.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        answer = try await running.request("/credentials/alice")
        XCTAssertEqual(answer.json["AccessKeyId"] as? String, "ASIASECONDLOGIN000001")

        // Cleared elsewhere: refused at the next request.
        try await other.clear(session: "alice")
        answer = try await running.request("/credentials/alice")
        XCTAssertEqual(answer.status, 404)
        XCTAssertEqual(answer.json["code"] as? String, "NoValidCredentials")
        try await running.stop()
    }

    // MARK: Lifecycle

    func testShutdownStopsListeningAndRunReturns() async throws {
        let client = FederationClient(keystore: InMemoryKeystore())
        let running = try start(client)
        let base = try await running.server.baseURL()
        try await running.stop()
        do {
            _ = try await CurlTransport.shared.send(Federation.HTTPRequest(method: "GET", url: base + "/credentials/alice"))
            XCTFail("the server still answers after shutdown")
        } catch {}
        await assertThrows(CredentialServerError.self, code: .notRunning) { try await running.server.baseURL() }
        await assertThrows(CredentialServerError.self, code: .alreadyRan) { try await running.server.run() }
    }

    func testShutdownBeforeRunStopsAtOnce() async throws {
        let server = try CredentialServer(client: FederationClient(keystore: InMemoryKeystore()))
        await server.shutdown()
        // run() must return at once without serving; a deadline turns a hang into a failure.
        let returned = LockedBox(false)
        let run = Task {
            defer { returned.withLock { $0 = true } }
            try await server.run()
        }
        let deadline = ContinuousClock.now + .seconds(5)
        while !returned.current, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        XCTAssertTrue(returned.current, "run() after shutdown() returned within 5 s")
        run.cancel()
        try await run.value
        await assertThrows(CredentialServerError.self, code: .notRunning) { try await server.baseURL() }
    }

    func testCancellationStopsTheServer() async throws {
        let running = try start(FederationClient(keystore: InMemoryKeystore()))
        _ = try await running.server.baseURL()
        running.task.cancel()
        _ = await running.task.result
        await assertThrows(CredentialServerError.self, code: .notRunning) { try await running.server.baseURL() }
    }

    /// A local user who connects and sends half a request cannot hold the connection: the
    /// server closes it after ``CredentialServerConfiguration/idleTimeout``, and serves
    /// everyone else meanwhile.
    func testAConnectionThatSendsHalfARequestIsClosedAfterTheIdleTimeout() async throws {
        let running = try await servingAlice(idleTimeout: .milliseconds(500))
        let port = try await running.port()
        let stalled = try XCTUnwrap(HalfSentRequest(port: port), "could not connect")
        // Blocking reads with a receive timeout, off the cooperative pool, from now: the time
        // of the close is when the read sees it, not when this test looks.
        let watching = Task {
            await withCheckedContinuation { continuation in
                Thread.detachNewThread { continuation.resume(returning: stalled.waitForClose(within: .seconds(5))) }
            }
        }
        let served = try await running.request("/credentials/alice")
        XCTAssertEqual(served.status, 200, "a stalled connection held up another client")
        let outcome = await watching.value
        switch outcome {
        case .closed(let after):
            XCTAssertGreaterThanOrEqual(after, .milliseconds(300), "closed before the idle timeout")
            // Not much after it either (seven times the timeout leaves room for a loaded machine).
            XCTAssertLessThan(after, .milliseconds(3500), "closed long after the idle timeout")
        case .stillOpen:
            XCTFail("the half-sent request's connection was still open after 5 s")
        case .answered(let text):
            XCTFail("the server answered a half-sent request: \(text)")
        }
        try await running.stop()
    }

    /// A local user who opens as many connections as the server keeps, and sends nothing on
    /// them, does not hold up the child: its silent connections make room for new ones.
    func testSilentConnectionsAtTheLimitDoNotHoldUpARequest() async throws {
        let running = try await servingAlice()
        let port = try await running.port()
        var silent: [HalfSentRequest] = []
        for _ in 0..<(CredentialServer.maximumConnections + 8) {
            silent.append(try XCTUnwrap(HalfSentRequest(port: port, sending: ""), "could not connect"))
        }
        let start = ContinuousClock.now
        let served = try await running.request("/credentials/alice")
        XCTAssertEqual(served.status, 200)
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(5), "silent connections held up the request until they timed out")
        // Silent connections made the room: as many as went past the limit were closed (the
        // server's event loops set connections up in parallel, so not exactly the oldest).
        let connections = silent
        let excess = connections.count + 1 - CredentialServer.maximumConnections
        let deadline = ContinuousClock.now + .seconds(2)
        while connections.filter(\.isClosedByServer).count < excess - 1 && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        XCTAssertGreaterThanOrEqual(connections.filter(\.isClosedByServer).count, excess - 1, "\(connections.filter(\.isClosedByServer).count) silent connections closed, \(excess) past the limit")
        XCTAssertLessThanOrEqual(connections.filter(\.isClosedByServer).count, excess, "more were closed than the limit needed")
        silent.removeAll()
        try await running.stop()
    }

    /// A fan-out of more processes than the server keeps connections (`xargs -P 300`), each
    /// keeping its connection after its answer: a new connection closes an idle kept-alive
    /// one rather than itself, so the next process is served (every new connection was closed
    /// as it arrived, until the idle timeout).
    func testKeptAliveConnectionsAtTheLimitMakeRoomForANewRequest() async throws {
        let running = try await servingAlice()
        let port = try await running.port()
        let good = try "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(running.token().value)\r\n\r\n"
        var kept: [HalfSentRequest] = []
        for _ in 0..<CredentialServer.maximumConnections {
            kept.append(try XCTUnwrap(HalfSentRequest(port: port, sending: good), "could not connect"))
        }
        // Every one answered, so idle.
        try await Task.sleep(for: .milliseconds(500))
        let served = try await running.request("/credentials/alice")
        XCTAssertEqual(served.status, 200)
        XCTAssertGreaterThanOrEqual(kept.filter(\.isClosedAfterItsAnswers).count, 1, "no kept-alive connection made room")
        kept.removeAll()
        try await running.stop()
    }

    /// A local user without the token cannot hold connections open: every refusal closes
    /// its connection (a refused request every few seconds, or a body sent a byte at a time,
    /// kept it open and filled the server's 256 connections); a served request keeps it,
    /// unless the client does not keep it (HTTP/1.0 without keep-alive, `Connection: close`),
    /// and says so.
    func testRefusalsCloseTheirConnectionAndAnswersKeepIt() async throws {
        let running = try await servingAlice()
        let token = try running.token().value
        let cases: [(request: String, status: String, closes: Bool)] = [
            ("GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "401", true),
            ("GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000000\r\n\r\nx", "401", true),
            ("GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: wrong\r\n\r\n", "403", true),
            ("GET /elsewhere HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(token)\r\n\r\n", "404", true),
            ("GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(token)\r\n\r\n", "200", false),
            // A client that does not keep its connection: HTTP/1.0 reads an answer until the
            // connection closes (it used to be held until the idle timeout).
            ("GET /credentials/alice HTTP/1.0\r\nAuthorization: \(token)\r\n\r\n", "200", true),
            ("GET /credentials/alice HTTP/1.0\r\nConnection: keep-alive\r\nAuthorization: \(token)\r\n\r\n", "200", false),
            ("GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: \(token)\r\n\r\n", "200", true),
        ]
        for item in cases {
            let (text, closed) = try await running.exchange(item.request)
            let line = item.request.prefix { $0 != "\r" }
            XCTAssertTrue(text.hasPrefix("HTTP/1.1 \(item.status)"), "\(line): \(text.prefix(40))")
            if item.status == "200" {
                XCTAssertTrue(text.contains("\"SecretAccessKey\""), "\(line): the whole answer arrives")
            }
            XCTAssertEqual(closed, item.closes, "\(line) \(item.closes ? "closes" : "keeps") the connection")
            XCTAssertEqual(text.lowercased().contains("connection: close"), item.closes, "\(line), and says so: \(text.prefix(200))")
        }
        try await running.stop()
    }

    /// A local user without the token cannot make the server buffer a header of any size:
    /// a field past the limit, or more fields than it takes, ends in a 400 and a closed
    /// connection.
    func testOversizedHeadersAreRefusedAndTheirConnectionClosed() async throws {
        let running = try await servingAlice()
        let field = String(repeating: "a", count: 100_000)
        let many = (0..<1_100).map { "X-F\($0): v\r\n" }.joined()
        for (name, headers) in [("one field of 100 KB", "X-Big: \(field)\r\n"), ("1,100 fields", many)] {
            let (text, closed) = try await running.exchange("GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\n\(headers)\r\n", within: .seconds(5))
            XCTAssertTrue(text.hasPrefix("HTTP/1.1 400"), "\(name): \(text.prefix(60))")
            XCTAssertTrue(closed, "\(name): the connection stayed open")
        }
        let served = try await running.request("/credentials/alice")
        XCTAssertEqual(served.status, 200)
        try await running.stop()
    }

    /// A client that sends requests and never reads the answers: once the connection can
    /// take no more output, its answer waited for room forever (no idle timeout runs while a
    /// request is in progress), so the connection stayed open and a graceful shutdown never
    /// ended (`federate exec` never exited after its command). It is closed after the idle
    /// timeout's length without room.
    func testAClientThatNeverReadsItsAnswersIsCutOffAndShutdownEnds() async throws {
        let running = try await servingAlice(idleTimeout: .milliseconds(500))
        let port = try await running.port()
        let request = try "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(running.token().value)\r\n\r\n"
        let client = try XCTUnwrap(NonReadingClient(port: port), "could not connect")
        // Requests until the connection fails: the sender blocks once the socket buffers are
        // full of answers and the server stops reading requests, until the server closes.
        // On a thread of its own: a blocking send must not hold one of the cooperative pool's
        // few threads, which the server needs.
        let sent = AsyncStream<Void>.makeStream()
        Thread.detachNewThread {
            client.sendUntilRefused(String(repeating: request, count: 8_000))
            sent.continuation.finish()
        }
        let deadline = ContinuousClock.now + .seconds(20)
        while !client.wasRefused, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        let closedByServer = client.wasRefused
        // Unblocks the sender if the server never closed (the test then fails, not hangs).
        client.shutDown()
        for await _ in sent.stream {}
        XCTAssertTrue(closedByServer, "the server kept a connection that never read its answers")

        let stopping = ContinuousClock.now
        try await running.stop()
        XCTAssertLessThan(ContinuousClock.now - stopping, .seconds(5), "shutdown waited for the stalled connection")
    }

    /// A request that never ends (here a keystore read that never returns) held a graceful
    /// shutdown for good; it is cancelled after the configuration's `gracefulShutdownLimit`.
    func testAGracefulShutdownWaitsForARequestInFlightOnlySoLong() async throws {
        let spy = ScriptableKeystore(wrapping: InMemoryKeystore())
        let client = try federatingClient(fake, keystore: spy)
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        var configuration = CredentialServerConfiguration(session: "alice")
        let limit = Duration.seconds(2)
        configuration.gracefulShutdownLimit = limit
        let running = RunningServer(try CredentialServer(client: client, configuration: configuration))
        let port = try await running.port()
        let gate = spy.holdNextRead(ofKey: "session.alice")
        defer { gate.release() }
        let request = try "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(running.token().value)\r\n\r\n"
        let connection = try XCTUnwrap(HalfSentRequest(port: port, sending: request))
        let arrived = await gate.arrived()
        XCTAssertTrue(arrived, "the request did not read the store")

        let stopping = ContinuousClock.now
        let stopped = Stopped()
        let stopper = Task {
            try? await running.stop()
            stopped.now()
        }
        let deadline = stopping + limit + .seconds(20)
        while stopped.at == nil, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        let at = try XCTUnwrap(stopped.at, "the shutdown waited for the request for good")
        XCTAssertGreaterThanOrEqual(at - stopping, limit - .milliseconds(100), "the request in flight was not waited for")
        // Bounded by the limit, not by some other timer (the 10 s idle timeout ends later).
        XCTAssertLessThan(at - stopping, limit + .seconds(5), "the shutdown outlasted its limit")
        gate.release()
        await stopper.value
        _ = connection
    }

    /// A server stopped while a client that pipelined requests leaves with one of them cut
    /// in half: closing the connection made the parser report the cut request, and the
    /// server answered it with a 400 on the closed connection, which stopped a debug build
    /// (SwiftNIO's pipelining assistance asserts on a write after its graceful close; about
    /// one run in three). Nothing is answered on a closed connection.
    func testAServerStoppedWhileAClientLeavesMidPipelineStopsCleanly() async throws {
        for _ in 0..<20 {
            // A short idle timeout: a connection left stalled is closed at once.
            let running = try await servingAlice(idleTimeout: .milliseconds(500))
            let port = try await running.port()
            let request = try "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(running.token().value)\r\n\r\n"
            let client = try XCTUnwrap(NonReadingClient(port: port))
            // As much as the socket buffers take at once; the server reads it a request at a
            // time, and the last one read is most likely cut.
            let unsent = client.send(String(repeating: request, count: 20_000), waiting: false)
            XCTAssertLessThan(unsent, 20_000 * request.utf8.count, "nothing was sent")
            client.shutDown()
            try await running.stop()
        }
    }

    /// A request with a body (the SDKs send none) sent a byte at a time kept its connection
    /// busy for good: each byte is a new part, so the idle timeout never ran out. It is
    /// answered, and the connection ends, the rest of the body unread.
    func testARequestWithABodyEndsItsConnectionOnceAnswered() async throws {
        let running = try await servingAlice()
        let head = try "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(running.token().value)\r\nContent-Length: 100000\r\n\r\nab"
        let (text, closed) = try await running.exchange(head, within: .seconds(3))
        XCTAssertTrue(text.hasPrefix("HTTP/1.1 200"), text)
        XCTAssertTrue(text.lowercased().contains("connection: close"), text)
        XCTAssertTrue(closed, "the connection waited for the rest of the body")
        // An empty body is no body: the connection stays.
        let empty = try "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(running.token().value)\r\nContent-Length: 0\r\n\r\n"
        let (emptyText, emptyClosed) = try await running.exchange(empty, within: .seconds(1))
        XCTAssertTrue(emptyText.hasPrefix("HTTP/1.1 200"), emptyText)
        XCTAssertFalse(emptyClosed, "a request with Content-Length: 0 lost its connection")
        let chunked = try "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(running.token().value)\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"
        let (chunkedText, chunkedClosed) = try await running.exchange(chunked, within: .seconds(3))
        XCTAssertTrue(chunkedText.hasPrefix("HTTP/1.1 200"), chunkedText)
        XCTAssertTrue(chunkedClosed, "the connection waited for the rest of the chunked body")
        try await running.stop()
    }

    /// Requests sent together on one connection: a client with the token has each answered
    /// in turn; after a refusal nothing more is answered, whatever follows it (each used to
    /// be answered); a request whose body does not parse gets one answer.
    func testNothingSentWithARefusedRequestIsAnswered() async throws {
        let running = try await servingAlice()
        let good = try "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(running.token().value)\r\n\r\n"
        let wrong = "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: wrong\r\n\r\n"
        let missing = "GET /credentials/alice HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        let cases: [(name: String, requests: [String], statuses: [String], closes: Bool)] = [
            ("three with the token", [good, good, good], ["200", "200", "200"], false),
            ("a wrong token, then the token", [wrong, good, good], ["403"], true),
            ("no token, then guesses", [missing] + Array(repeating: wrong, count: 20), ["401"], true),
            ("the token, then a wrong one, then the token", [good, wrong, good], ["200", "403"], true),
            // A body that does not parse, in the same segment as its head: the answer alone
            // (a debug build of the server used to stop on the 400 that followed it).
            ("a malformed body without the token", ["GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"], ["401"], true),
            ("a malformed body with the token", [good.replacingOccurrences(of: "\r\n\r\n", with: "\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")], ["200"], true),
            ("the token, then garbage", [good, "NOT HTTP\r\n\r\n"], ["200", "400"], true),
        ]
        for item in cases {
            // The server must still be there for each case (a malformed body once stopped it).
            let before = try await running.request("/credentials/alice")
            XCTAssertEqual(before.status, 200, "before: \(item.name)")
            let (text, closed) = try await running.exchange(item.requests.joined())
            let statuses = text.components(separatedBy: "HTTP/1.1 ").dropFirst().map { String($0.prefix(3)) }
            XCTAssertEqual(statuses, item.statuses, "\(item.name): \(text.prefix(400))")
            XCTAssertEqual(closed, item.closes, "\(item.name)")
        }
        try await running.stop()
    }

    func testRejectsABadConfiguration() {
        let client = FederationClient(keystore: InMemoryKeystore())
        for sessions in [[], ["../etc"], [""], ["a/b"]] {
            assertThrows(CredentialServerError.self, code: .invalidConfiguration) {
                try CredentialServer(client: client, configuration: CredentialServerConfiguration(sessions: sessions))
            }
        }
        // A zero or negative idle timeout would close every connection at once.
        for timeout in [Duration.zero, .seconds(-1)] {
            var configuration = CredentialServerConfiguration(session: "alice")
            configuration.idleTimeout = timeout
            assertThrows(CredentialServerError.self, code: .invalidConfiguration) {
                try CredentialServer(client: client, configuration: configuration)
            }
            // Nor is a shutdown limit of zero or less one: it would cancel every request at once.
            var limited = CredentialServerConfiguration(session: "alice")
            limited.gracefulShutdownLimit = timeout
            assertThrows(CredentialServerError.self, code: .invalidConfiguration) {
                try CredentialServer(client: client, configuration: limited)
            }
        }
    }

    // MARK: Secrets

    func testLogsNeverShowTheTokenOrACredential() async throws {
        let logging = InMemoryLogHandler()
        var logger = Logger(label: "test", factory: { _ in logging })
        logger.logLevel = .trace
        let client = try federatingClient(fake, keystore: InMemoryKeystore())
        try await client.federate(token: TestJWT.valid(), provider: .google, session: "alice")
        let running = try start(client, logger: logger)
        let token = try running.token().value
        _ = try await running.request("/credentials/alice")
        _ = try await running.request("/credentials/alice", authorization: "wrong")
        // Near misses that carry the token, or most of it: a log line that quoted what was
        // presented would show it.
        for presented in ["Token " + token, "Bearer  " + token, String(token.dropLast()) + "x", token + token] {
            let refused = try await running.request("/credentials/alice", authorization: presented)
            XCTAssertEqual(refused.status, 403)
        }
        _ = try await running.request("/credentials/alice", authorization: .none)
        _ = try await running.request("/nothing")
        try await running.stop()
        // Each entry's message, metadata and logged error.
        let text = logging.entries.map { entry in
            "\(entry.message) \(entry.metadata) \(entry.error.map { String(describing: $0) } ?? "")"
        }.joined(separator: "\n")
        XCTAssertFalse(logging.entries.isEmpty)
        XCTAssertTrue(text.contains("credentials served"), text)
        XCTAssertNil(leakedRun(in: text, of: [token, FakeCognito.secretKey, FakeCognito.sessionToken]), text)
        XCTAssertFalse(text.contains(FakeCognito.accessKeyId))

        let redacted = try running.token()
        let endpoint = CredentialEndpoint(session: "alice", url: "http://127.0.0.1:1/credentials/alice", authorizationToken: redacted)
        for shown in ["\(redacted)", String(reflecting: redacted), "\(endpoint)", dumped(endpoint)] {
            XCTAssertNil(leakedRun(in: shown, of: [token]), shown)
        }
    }

    /// Whether a TCP connection to `address`:`port` is accepted.
    private func canConnect(to address: String, port: UInt16) -> Bool {
        guard let descriptor = LoopbackSocket.connect(port: port, address: address) else { return false }
        close(descriptor)
        return true
    }

    private func dumped(_ value: some Any) -> String {
        var text = ""
        dump(value, to: &text)
        return text
    }
}

/// When something stopped, once it has.
private final class Stopped: Sendable {
    private let instant = Mutex<ContinuousClock.Instant?>(nil)

    var at: ContinuousClock.Instant? { instant.withLock { $0 } }

    func now() { instant.withLock { $0 = .now } }
}
