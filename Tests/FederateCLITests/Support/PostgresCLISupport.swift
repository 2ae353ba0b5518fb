import BrokerTestSupport
import Foundation
import Synchronization
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// `federate` against a real PostgreSQL: one server per test class (started on first use,
/// stopped in the class's `tearDown`), a fresh database per test, and a harness whose
/// keystore is that database's `postgres://` URL, with the password role's password
/// (URL-special characters, percent-encoded) and a random key in `$IDENTITY_BROKER_KEY`.
/// The password, its encoded form and the key are registered as secrets no output may show.
class FederatePostgresTestCase: XCTestCase {
    private static let servers = Mutex<[ObjectIdentifier: PostgresServer]>([:])

    var server: PostgresServer!
    var database: String!
    var harness: FederateHarness!
    /// The keystore URL (holds the password).
    var url: String!
    /// The base64 key every `federate` here gets.
    var key: String!

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
        url = postgresURL(database: database)
        key = Self.randomKey()
        harness = try makeHarness()
    }

    override func tearDown() {
        harness?.cleanUp()
    }

    override class func tearDown() {
        let server = servers.withLock { $0.removeValue(forKey: ObjectIdentifier(self)) }
        server?.stop()
        super.tearDown()
    }

    /// The password role's URL for `database`, password percent-encoded.
    func postgresURL(database: String, scheme: String = "postgres") -> String {
        "\(scheme)://\(server.passwordRole):\(encodedPassword)@127.0.0.1:\(server.port)/\(database)?sslmode=disable"
    }

    var encodedPassword: String {
        server.password.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
    }

    /// A harness (its own HOME, as another host would have) on `url`, with `key`.
    func makeHarness(url: String? = nil, key: String? = nil) throws -> FederateHarness {
        let harness = try FederateHarness()
        harness.environment["IDENTITY_BROKER_KEYSTORE"] = url ?? self.url
        harness.environment["IDENTITY_BROKER_KEY"] = key ?? self.key
        harness.neverPrinted = [server.password, encodedPassword, key ?? self.key]
        harness.notOnStderr = [FakeCognito.secretKey, FakeCognito.sessionToken]
        return harness
    }

    static func randomKey() -> String {
        Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
    }

    /// A proxy in front of the database, with the harness's keystore URL pointed through it.
    func keystoreThroughProxy() throws -> FreezableTCPProxy {
        let proxy = try FreezableTCPProxy(targetPort: UInt16(server.port))
        harness.environment["IDENTITY_BROKER_KEYSTORE"] = url.replacingOccurrences(of: ":\(server.port)/", with: ":\(proxy.port)/")
        return proxy
    }

    func loginArguments(_ cognito: LoopbackHTTPServer, session: String) -> [String] {
        loginArguments(endpoint: cognito.url(), session: session)
    }

    func loginArguments(_ cognito: FakeCognito, session: String) -> [String] {
        loginArguments(endpoint: cognito.endpoint, session: session)
    }

    func loginArguments(endpoint: String, session: String) -> [String] {
        ["login", "--pool-id", FakeCognito.poolId, "--provider", "google", "--token-stdin", "--endpoint", endpoint, "--session", session]
    }

    /// The one value a query on this test's database returns (``PostgresServer/psqlValue(_:database:)``).
    func sqlValue(_ statement: String) throws -> String {
        try server.psqlValue(statement, database: database)
    }

    /// Asserts that no 16-character run of `secrets` (as text, or as the hex `pg_dump` prints
    /// `bytea` in) is in a dump of the database, nor of `keys` (raw key bytes, as that hex or
    /// in base64). A secret that is the base64 of a 32-byte key (`$IDENTITY_BROKER_KEY`) is
    /// also looked for as the hex of the key's bytes, as a `bytea` holding the key would show.
    func assertDumpHoldsNoSecret(_ secrets: [String], keys: [[UInt8]] = [], file: StaticString = #filePath, line: UInt = #line) throws {
        let dump = try server.dump(database)
        XCTAssertTrue(dump.contains("identity_broker_items"), "the dump holds the items table", file: file, line: line)
        let decoded = secrets.compactMap { Data(base64Encoded: $0) }.filter { $0.count == 32 }.map { [UInt8]($0) }
        let bytes: [[UInt8]] = secrets.map { Array($0.utf8) } + decoded + keys
        let hex = bytes.map { $0.map { String(format: "%02x", $0) }.joined() }
        let text = secrets + keys.map { Data($0).base64EncodedString() }
        XCTAssertNil(leakedRun(in: dump, of: text), "a secret is in the database in plaintext", file: file, line: line)
        XCTAssertNil(leakedRun(in: dump, of: hex), "a secret is in the database as hex bytes", file: file, line: line)
    }
}

/// A `federate` process started without waiting: the token on its stdin, its output to files.
final class SpawnedFederate {
    let arguments: [String]
    private let process = Process()
    private let outPath: String
    private let errPath: String
    private let handles: [FileHandle]

    init(_ harness: FederateHarness, _ arguments: [String], stdin: String) throws {
        self.arguments = arguments
        let tag = UUID().uuidString
        outPath = harness.directory + "/.sp-out-\(tag)"
        errPath = harness.directory + "/.sp-err-\(tag)"
        _ = FileManager.default.createFile(atPath: outPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        let out = try FileHandle(forWritingTo: URL(fileURLWithPath: outPath))
        let err = try FileHandle(forWritingTo: URL(fileURLWithPath: errPath))
        handles = [out, err]
        process.executableURL = URL(fileURLWithPath: harness.binary)
        process.arguments = arguments
        process.environment = harness.environment
        process.currentDirectoryURL = URL(fileURLWithPath: harness.directory)
        process.standardOutput = out
        process.standardError = err
        let input = Pipe()
        process.standardInput = input
        try process.run()
        input.fileHandleForWriting.write(Data((stdin + "\n").utf8))
        try input.fileHandleForWriting.close()
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        for handle in handles { try? handle.close() }
        try? FileManager.default.removeItem(atPath: outPath)
        try? FileManager.default.removeItem(atPath: errPath)
    }

    func kill9() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    /// Waits (at most `timeout` seconds, then SIGKILL and a failure) and returns the status
    /// (128 + signal when killed).
    func wait(timeout: TimeInterval = 60, file: StaticString = #filePath, line: UInt = #line) -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(5_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            XCTFail("federate \(arguments.first ?? "") did not finish within \(timeout) s", file: file, line: line)
        }
        process.waitUntilExit()
        return process.terminationReason == .exit ? process.terminationStatus : 128 + process.terminationStatus
    }

    var stdout: String { (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "" }
}
