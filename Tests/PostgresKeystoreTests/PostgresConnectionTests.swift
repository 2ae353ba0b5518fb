import BrokerTestSupport
import Foundation
@testable import PostgresKeystore
import PostgresNIO
import SecureStorage
import XCTest

/// What opening a keystore reports when the connection itself is refused (a failed login
/// with its SQLSTATE, never the password, or TLS the server cannot give), and where its
/// connections run.
final class PostgresConnectionTests: PostgresTestCase, @unchecked Sendable {
    func testThePasswordRoleNeedsItsPassword() async throws {
        var configuration = try configuration()
        configuration.password = "wrong password"
        let error = await keystoreError {
            try await PostgresKeystore(configuration: configuration, service: "tool", keySource: .raw(self.key))
        }
        XCTAssertEqual(error?.code, .storeUnavailable)
        XCTAssertTrue(error?.reason.contains("28P01") ?? false, "\(String(describing: error))")
        XCTAssertFalse("\(String(describing: error))".contains("wrong password"))
    }

    /// A port nothing listens on: the reason says so in words, not NIO's nested
    /// descriptions of the address tried and the errno's name.
    func testARefusedConnectionSaysNothingListensThere() async throws {
        var configuration = try configuration()
        configuration.port = try freeLoopbackPort()
        configuration.operationTimeout = .seconds(5)
        let error = await keystoreError {
            try await PostgresKeystore(configuration: configuration, service: "tool", keySource: .raw(self.key))
        }
        XCTAssertEqual(error?.code, .storeUnavailable)
        XCTAssertTrue(
            error?.reason.contains("cannot connect: connection refused (nothing accepts connections at 127.0.0.1:\(configuration.port)") ?? false,
            "\(String(describing: error))")
        XCTAssertFalse(error?.reason.contains("SingleConnectionFailure") ?? true, "\(String(describing: error))")
    }

    /// A database whose encoding is not UTF-8 (`LATIN1`): the keystore's connections say
    /// their text is UTF-8, so the server converts a key rather than storing each of its
    /// UTF-8 bytes as a character (`é` as `Ã©`, a different key to every other client). The
    /// connections are named in `pg_stat_activity` for the database's administrators.
    func testConnectionsDeclareUTF8AndNameThemselves() async throws {
        database = "broker_latin1_\(UUID().uuidString.prefix(8).lowercased())"
        try server.psql("""
            CREATE DATABASE \(database!) OWNER \(server.passwordRole) TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'
            """)
        let keystore = try await keystore()
        try await keystore.set([1], forKey: "session.é")
        // One character in the database's encoding (psql prints LATIN1 here, so it is compared there).
        let stored = try server.psqlValue(
            "SELECT key = 'session.' || pg_catalog.chr(233) FROM identity_broker_items WHERE key LIKE 'session.%'", database: database)
        XCTAssertEqual(stored, "t")
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, ["session.é"])
        let named = try server.psqlValue(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = '\(database!)' AND application_name = 'identity-broker'")
        XCTAssertGreaterThan(Int(named) ?? 0, 0, "no connection named identity-broker")
    }

    func testTLSRequiredFromAServerWithoutTLSFailsClearly() async throws {
        for mode in [PostgresKeystore.TLSMode.require, .verifyFull] {
            let error = await keystoreError { try await self.keystore { $0.tls = mode } }
            XCTAssertEqual(error?.code, .storeUnavailable, "\(mode)")
            XCTAssertTrue(error?.reason.contains("TLS") ?? false, "\(String(describing: error))")
        }
        // `prefer` falls back to plain TCP on a server without TLS.
        let preferred = try await keystore { $0.tls = .prefer }
        try await preferred.set([1], forKey: "k")
    }

    /// A keystore's connections share one event loop, so that a commit's answer and its own
    /// notification on the listening connection are read by one thread.
    func testEveryConnectionOfAKeystoreRunsOnOneEventLoop() async throws {
        var loopsInGroup = 0
        for _ in PostgresClient.defaultEventLoopGroup.makeIterator() { loopsInGroup += 1 }
        if loopsInGroup < 2 {
            throw missingPrerequisite("NIO's shared group has one event loop on this machine (one core): every connection shares it anyway")
        }
        let keystore = try await keystore()
        let feed = keystore.changes()
        let listening = await eventually { keystore.isListeningForChanges }
        XCTAssertTrue(listening)
        // Five connections held at once (with the listener's, six of the pool's eight).
        @Sendable func hold(_ count: Int, _ held: [PostgresConnection]) async throws -> (ids: Set<Int>, loops: Int) {
            guard count > 0 else { return (Set(held.map(\.id)), Set(held.map { ObjectIdentifier($0.eventLoop) }).count) }
            return try await keystore.perform("holding a connection") { connection, _ in try await hold(count - 1, held + [connection]) }
        }
        let (ids, loops) = try await hold(5, [])
        XCTAssertEqual(ids.count, 5, "five connections held at once")
        XCTAssertEqual(loops, 1, "on one event loop")
        _ = feed
    }

    /// postgres-nio drops a statement written to a connection that has closed and never
    /// answers it. The keystore never sends one there: the transaction fails at once as a
    /// stale connection and runs again on another, instead of waiting out its deadline (in
    /// CI, a commit lost before `COMMIT` timed out this way rather than running again).
    /// Each connection of the pool may be one the server ended: here the first two are.
    func testATransactionOnAConnectionThatClosedRunsAgainOnAnother() async throws {
        let keystore = try await keystore { $0.operationTimeout = .seconds(30) }
        let server: PostgresServer = server
        let attempts = Locked(0)
        let answer = try await keystore.perform("a transaction") { connection, logger in
            if attempts.withLock({ $0 += 1; return $0 }) <= 2 {
                let pid = try await connection.query("SELECT pg_backend_pid()", logger: logger).collect()[0].decode(Int32.self)
                _ = try server.psql("SELECT pg_terminate_backend(\(pid))")
                while !connection.isClosed { try await Task.sleep(for: .milliseconds(10)) }
            }
            return try await PostgresKeystore.transaction(on: connection, logger: logger) {
                try await connection.query("SELECT 42", logger: logger).collect()[0].decode(Int.self)
            }
        }
        XCTAssertEqual(answer, 42)
        XCTAssertEqual(attempts.withLock { $0 }, 3, "ran again on another connection, twice")
    }

    /// The same for the commit's `CALL`, which has no `BEGIN` before it: sent only on a
    /// connection still open (`queryUnlessClosed`), so one found closed is a stale connection
    /// (the commit runs on another), never a commit left waiting for its deadline or
    /// reported with an unknown outcome.
    func testACommitOnAConnectionThatClosedRunsAgainOnAnother() async throws {
        let keystore = try await keystore { $0.operationTimeout = .seconds(30) }
        let server: PostgresServer = server
        let attempts = Locked(0)
        let (namespace, origin) = (keystore.namespace, keystore.origin)
        let call = PostgresSchema.commitCall(inSchema: "public")
        let started = ContinuousClock.now
        let applied = try await keystore.perform("a commit") { connection, logger in
            if attempts.withLock({ $0 += 1; return $0 }) == 1 {
                let pid = try await connection.query("SELECT pg_backend_pid()", logger: logger).collect()[0].decode(Int32.self)
                _ = try server.psql("SELECT pg_terminate_backend(\(pid))")
                while !connection.isClosed { try await Task.sleep(for: .milliseconds(10)) }
            }
            return try await PostgresKeystore.applyDistinct(
                [[.set(key: "session.alice", sealed: [1, 2, 3], version: 1)]], namespace: namespace, origin: origin, call: call,
                allowance: .seconds(30), on: connection, logger: logger)
        }
        XCTAssertEqual(applied, [[true]])
        XCTAssertEqual(attempts.withLock { $0 }, 2, "ran again on another connection")
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(10), "not after waiting for its deadline")
        let stored = try server.psqlValue("SELECT count(*) FROM identity_broker_items WHERE key = 'session.alice'", database: database)
        XCTAssertEqual(stored, "1")
    }
}
