import BrokerTestSupport
import Foundation
import Logging
import PostgresNIO
import PostgresKeystore
import SecureStorage
import Synchronization
import XCTest

/// One PostgreSQL server per test class (started on first use, stopped in the class's
/// `tearDown`), a fresh database per test, and helpers to open keystores on it.
class PostgresTestCase: XCTestCase, @unchecked Sendable {
    private static let servers = Mutex<[ObjectIdentifier: PostgresServer]>([:])

    /// This class's server, started on first use.
    var server: PostgresServer!
    /// This test's database, owned by the password role.
    var database: String!
    /// Keystores opened through ``keystore(_:)``, closed in `tearDown`.
    private let opened = Mutex<[PostgresKeystore]>([])
    /// The connection ``observedCount(_:)`` asks on and its database (a test may move
    /// ``database`` to another), opened on first use, closed in `tearDown`.
    private let observer = Mutex<(database: String, connection: PostgresConnection)?>(nil)

    /// A fixed 32-byte key, as every instance of a fleet would share.
    let key = [UInt8](repeating: 7, count: 32)

    override func setUpWithError() throws {
        let id = ObjectIdentifier(type(of: self))
        if let running = Self.servers.withLock({ $0[id] }) {
            server = running
        } else {
            let started = try PostgresServer.start()
            Self.servers.withLock { $0[id] = started }
            server = started
        }
        database = try server.createDatabase()
    }

    override func tearDown() async throws {
        for keystore in opened.withLock({ $0 }) { await keystore.close() }
        opened.withLock { $0.removeAll() }
        if let open = observer.withLock({ $0.take() }) { try? await open.connection.close() }
    }

    override class func tearDown() {
        let server = servers.withLock { $0.removeValue(forKey: ObjectIdentifier(self)) }
        server?.stop()
        super.tearDown()
    }

    /// A configuration for this test's database: the password role with its password
    /// (through a URL, percent-encoded), or the trusted superuser.
    func configuration(withPassword: Bool = true) throws -> PostgresKeystore.Configuration {
        var configuration: PostgresKeystore.Configuration
        if withPassword {
            let encoded = server.password.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            configuration = try PostgresKeystore.Configuration(
                url: "postgres://\(server.passwordRole):\(encoded)@127.0.0.1:\(server.port)/\(database!)?sslmode=disable")
        } else {
            configuration = PostgresKeystore.Configuration(host: "127.0.0.1", port: server.port, username: server.superuser, database: database)
        }
        configuration.operationTimeout = .seconds(3)
        configuration.connectTimeout = .seconds(2)
        configuration.reconnectDelay = .milliseconds(200)
        return configuration
    }

    /// How many other connections to this test's database are in `condition` (SQL on
    /// `pg_stat_activity`'s columns), asked through ``observedCount(_:)``.
    func activityCount(_ condition: String) async throws -> Int {
        try await observedCount(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND (\(condition))")
    }

    /// Runs `sql` (one row of one `int8`, a count) as the superuser on this test's database,
    /// on a connection of the test's own: a query there takes milliseconds, where a `psql`
    /// run costs a process start, under load long enough to miss a state that lasts half a
    /// second. A connection a test (or a restart) ended is replaced. For one caller at a time
    /// (a test's own checks), not for concurrent tasks.
    func observedCount(_ sql: String) async throws -> Int {
        let logger = Logger(label: "observer")
        func count(on connection: PostgresConnection) async throws -> Int {
            let rows = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger).collect()
            return Int(try rows[0].decode(Int64.self))
        }
        if let open = observer.withLock({ $0 }) {
            if open.database == database, let counted = try? await count(on: open.connection) { return counted }
            observer.withLock { $0 = nil }
            try? await open.connection.close()
        }
        let connection = try await superuserConnection(id: 2, applicationName: "test-observer", logger: logger)
        observer.withLock { [database] in $0 = (database!, connection) }
        return try await count(on: connection)
    }

    /// A connection of the test's own to this test's database (or `database`), as the
    /// superuser; its caller closes it (postgres-nio stops the process when one is released
    /// open).
    func superuserConnection(
        id: Int, applicationName: String? = nil, database: String? = nil, logger: Logger
    ) async throws -> PostgresConnection {
        var configuration = PostgresConnection.Configuration(
            host: "127.0.0.1", port: server.port, username: server.superuser, password: nil, database: database ?? self.database, tls: .disable)
        if let applicationName { configuration.options.additionalStartupParameters = [("application_name", applicationName)] }
        return try await PostgresConnection.connect(configuration: configuration, id: id, logger: logger)
    }

    /// Waits until `count` statements on this test's database sleep in `pg_sleep` (a test's
    /// trigger holding a commit), so that what a test queues behind them queues for certain.
    func waitForSleepingStatements(_ count: Int = 1, file: StaticString = #filePath, line: UInt = #line) async throws {
        let started = ContinuousClock.now
        while try await activityCount("wait_event = 'PgSleep'") < count {
            guard ContinuousClock.now - started < .seconds(30) else {
                XCTFail("no statement of the test began its sleep", file: file, line: line)
                return
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Starts `commit` while another transaction holds `key`'s row (on a connection of its
    /// own, not a `psql` left running on another thread: that held back the test's own
    /// `psql` checks until it ended, so they never saw the row held), runs
    /// `meanwhile` on that connection once the commit waits for the row, then lets the row go
    /// (rolled back, or with `changingIt` an update of it committed) and returns the commit's
    /// result. `holding`, when given, takes the row in the transaction instead (a row of its
    /// own inserting, say). The connection is closed whatever happens (postgres-nio stops
    /// the process when one is released open).
    func behindAHeldRow<T: Sendable>(
        _ key: String, changingIt: Bool = false,
        holding: ((PostgresConnection, Logger) async throws -> Void)? = nil,
        meanwhile: (PostgresConnection, Logger) async throws -> Void = { _, _ in },
        commit: @escaping @Sendable () async throws -> T,
        file: StaticString = #filePath, line: UInt = #line
    ) async throws -> T {
        let logger = Logger(label: "lock-holder")
        let holder = try await superuserConnection(id: 1, logger: logger)
        let result: Result<T, any Error>
        var committing: Task<T, any Error>?
        do {
            // Swift's strings are UTF-8, whatever the database's encoding.
            try await holder.query("SET client_encoding TO 'UTF8'", logger: logger)
            try await holder.query("BEGIN", logger: logger)
            if let holding {
                try await holding(holder, logger)
            } else if changingIt {
                try await holder.query("UPDATE identity_broker_items SET version = version WHERE key = \(key)", logger: logger)
            } else {
                _ = try await holder.query("SELECT key FROM identity_broker_items WHERE key = \(key) FOR UPDATE", logger: logger).collect()
            }
            committing = Task { try await commit() }
            let waiting = await eventually(timeout: .seconds(10), every: .milliseconds(20)) {
                (try? await self.activityCount("wait_event_type = 'Lock'")) == 1
            }
            XCTAssertTrue(waiting, "the commit never waited for the held row", file: file, line: line)
            try await meanwhile(holder, logger)
            try await holder.query(changingIt ? "COMMIT" : "ROLLBACK", logger: logger)
            result = .success(try await committing!.value)
        } catch {
            result = .failure(error)
        }
        try await holder.close()
        // A commit left running (something above failed) ends before the test goes on.
        _ = try? await committing?.value
        return try result.get()
    }

    /// Whether every keystore the test opened listens for other instances' changes, within
    /// `timeout`.
    func everyKeystoreListens(timeout: Duration = .seconds(10)) async -> Bool {
        let keystores = opened.withLock { $0 }
        return await eventually(timeout: timeout) { keystores.allSatisfy(\.isListeningForChanges) }
    }

    /// Opens a keystore on this test's database, closed in `tearDown`.
    func keystore(
        service: String = "tool",
        group: AccessGroup = .none,
        keySource: KeySource? = nil,
        logger: Logger? = nil,
        configure: (inout PostgresKeystore.Configuration) -> Void = { _ in }
    ) async throws -> PostgresKeystore {
        var configuration = try configuration()
        configure(&configuration)
        let keystore = try await PostgresKeystore(
            configuration: configuration, service: service, accessGroup: group, keySource: keySource ?? .raw(key), logger: logger)
        opened.withLock { $0.append(keystore) }
        return keystore
    }
}

/// Records `stream`, one of `keystore`'s change streams, once `keystore` listens: its first
/// `.all` seen (every `LISTEN` that takes effect reports one).
func listeningRecorder(
    _ keystore: PostgresKeystore, _ stream: AsyncStream<KeystoreChange>, file: StaticString = #filePath, line: UInt = #line
) async -> ChangeRecorder {
    let recorder = ChangeRecorder(stream)
    let listening = await eventually { keystore.isListeningForChanges && recorder.contains(.all) }
    XCTAssertTrue(listening, "the feed never listened (listening starts with .all): \(recorder.changes)", file: file, line: line)
    return recorder
}

/// Collects a stream's changes until `predicate` holds or `seconds` pass; returns what it saw.
func collectChanges(
    _ stream: AsyncStream<KeystoreChange>,
    within seconds: Double,
    until predicate: @escaping @Sendable (Set<KeystoreChange>) -> Bool
) async -> Set<KeystoreChange> {
    let seen = Locked<Set<KeystoreChange>>([])
    await withTaskGroup(of: Void.self) { group in
        group.addTask {
            for await change in stream {
                let done = seen.withLock { seen -> Bool in
                    seen.insert(change)
                    return predicate(seen)
                }
                if done { return }
            }
        }
        group.addTask { try? await Task.sleep(for: .seconds(seconds)) }
        await group.next()
        group.cancelAll()
    }
    return seen.withLock { $0 }
}

/// Runs `body` and returns the ``KeystoreError`` it throws, failing the test if it throws none.
func keystoreError<T>(
    _ body: () async throws -> T, file: StaticString = #filePath, line: UInt = #line
) async -> KeystoreError? {
    do {
        _ = try await body()
        XCTFail("expected a KeystoreError", file: file, line: line)
        return nil
    } catch let error as KeystoreError {
        return error
    } catch {
        XCTFail("expected a KeystoreError, got \(error)", file: file, line: line)
        return nil
    }
}

/// Records everything a change stream yields, from a task of its own, so tests can poll.
final class ChangeRecorder: Sendable {
    private let recorded = Locked<[KeystoreChange]>([])
    private let task = Locked<Task<Void, Never>?>(nil)

    init(_ stream: AsyncStream<KeystoreChange>) {
        let recorded = self.recorded
        let task = Task {
            for await change in stream { recorded.withLock { $0.append(change) } }
        }
        self.task.withLock { $0 = task }
    }

    /// Everything recorded so far, in order.
    var changes: [KeystoreChange] { recorded.withLock { $0 } }

    func contains(_ change: KeystoreChange) -> Bool { recorded.withLock { $0.contains(change) } }

    /// Stops recording (ending the stream).
    func stop() { task.withLock { $0 }?.cancel() }
}

/// A value behind a lock, in a class so that escaping closures can share it.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R { try mutex.withLock { try body(&$0) } }
}

/// Reads `keys` at once, started in a shuffled order (the keystore combines concurrent reads
/// into shared statements); each reader's result by its index in `keys`.
func readAtOnce(_ keys: [String], from keystore: PostgresKeystore) async -> [Int: Result<[UInt8]?, KeystoreError>] {
    await withTaskGroup(of: (Int, Result<[UInt8]?, KeystoreError>).self) { group in
        for (index, key) in keys.enumerated().shuffled() {
            group.addTask {
                do throws(KeystoreError) {
                    return (index, .success(try await keystore.value(forKey: key)))
                } catch {
                    return (index, .failure(error))
                }
            }
        }
        return await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
    }
}
