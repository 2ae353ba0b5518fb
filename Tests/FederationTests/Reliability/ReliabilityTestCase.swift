import BrokerTestSupport
import Federation
import Foundation
import InMemoryLogging
import Logging
import XCTest

/// The shared setup of the reliability tests: a ``FakeCognito`` served on the
/// loopback server and a ``FederationClient`` built with its public initializer,
/// so every request crosses libcurl and a real socket.
///
/// Timeouts are short (connect 400 ms, attempt 500 ms) and backoff is capped at
/// 20 ms, so a failing case ends quickly; wall-clock durations are only ever
/// asserted as generous upper bounds ("returns promptly") or as lower bounds
/// the client itself guarantees (a honoured `Retry-After`).
class ReliabilityTestCase: XCTestCase {
    /// 3 attempts, backoff ≤ 20 ms, server hints ≤ 50 ms.
    static let fastRetry = RetryPolicy(maxAttempts: 3, maxBackoff: .milliseconds(20), retryAfterCap: .milliseconds(50))

    private var cognitos: [FakeCognito] = []

    override func tearDown() {
        for cognito in cognitos { cognito.stopServing() }
        cognitos = []
        super.tearDown()
    }

    /// A fresh fake service on the loopback server, stopped at tear-down. Default
    /// credentials expire an hour after each request, each with a new access key ID.
    func makeCognito() throws -> FakeCognito {
        let cognito = try FakeCognito.served(credentialLifetime: 3600, numbersCredentials: true)
        cognitos.append(cognito)
        return cognito
    }

    /// A client of `cognito` with the fast settings, adjusted by `configure`.
    func makeClient(
        _ cognito: FakeCognito,
        logger: Logger? = nil,
        configure: (inout FederationConfiguration) -> Void = { _ in }
    ) throws -> FederationClient {
        var configuration = FederationConfiguration(
            identityPoolId: "us-east-1:11111111-2222-3333-4444-555555555555",
            endpoint: cognito.endpoint,
            connectTimeout: .milliseconds(400),
            requestTimeout: .milliseconds(500),
            federationTimeout: .seconds(20),
            retry: Self.fastRetry
        )
        configure(&configuration)
        return try FederationClient(configuration: configuration, logger: logger)
    }

    /// Federates `session` successfully, checks it is federated, then forgets
    /// the requests that took; returns the session as it stands.
    func establishGoodSession(
        _ client: FederationClient,
        _ cognito: FakeCognito,
        session: String = "alice",
        file: StaticString = #filePath,
        line: UInt = #line
    ) async throws -> SessionSnapshot {
        try await client.federate(token: TestJWT.valid(), provider: .google, session: session)
        let snapshot = try await client.session(session)
        XCTAssertEqual(snapshot.state, .federated, file: file, line: line)
        XCTAssertEqual(snapshot.identityId, FakeCognito.defaultIdentityId, file: file, line: line)
        XCTAssertNotNil(snapshot.credentials, file: file, line: line)
        cognito.resetRecording()
        return snapshot
    }

    /// Federates `session` again, expecting a ``FederationError``.
    @discardableResult
    func federateExpectingError(
        _ client: FederationClient,
        session: String = "alice",
        _ code: FederationError.Code,
        file: StaticString = #filePath,
        line: UInt = #line
    ) async -> FederationError? {
        await assertThrows(FederationError.self, code: code, file: file, line: line) {
            try await client.federate(token: TestJWT.valid(), provider: .google, session: session)
        }
    }

    /// Asserts `session` is exactly `previous`: state, identity, provider and credentials.
    func assertIntact(
        _ client: FederationClient,
        session: String = "alice",
        _ previous: SessionSnapshot,
        file: StaticString = #filePath,
        line: UInt = #line
    ) async throws {
        let now = try await client.session(session)
        XCTAssertEqual(now.state, previous.state, "state", file: file, line: line)
        XCTAssertEqual(now.identityId, previous.identityId, "identity ID", file: file, line: line)
        XCTAssertEqual(now.credentials, previous.credentials, "credentials", file: file, line: line)
        XCTAssertEqual(now, previous, file: file, line: line)
    }

    /// Asserts `session` holds nothing (it was never federated).
    func assertNotFederated(
        _ client: FederationClient,
        session: String,
        file: StaticString = #filePath,
        line: UInt = #line
    ) async throws {
        let now = try await client.session(session)
        XCTAssertEqual(now.state, .notFederated, file: file, line: line)
        XCTAssertNil(now.identityId, file: file, line: line)
        XCTAssertNil(now.credentials, file: file, line: line)
    }

    /// A logger that keeps debug lines, and its handler.
    func memoryLogger() -> (Logger, InMemoryLogHandler) {
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "reliability", factory: { _ in handler })
        logger.logLevel = .debug
        return (logger, handler)
    }

    /// The number of retries `handler` saw logged.
    func retriesLogged(_ handler: InMemoryLogHandler) -> Int {
        handler.entries.filter { $0.message == "Retrying after a failed attempt" }.count
    }
}
