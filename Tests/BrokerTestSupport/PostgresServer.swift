public import Foundation
import Glibc
import XCTest

/// A real PostgreSQL server for tests: `initdb` and `pg_ctl` from `/usr/lib/postgresql/*/bin`
/// in a temporary directory, listening on 127.0.0.1 and a free port.
///
/// When the tests run as root, every PostgreSQL command runs as the `postgres` user (through
/// `runuser -u postgres --`), which owns the temporary directory: PostgreSQL refuses to run as
/// root. Authentication is `trust` on 127.0.0.1 for every role except ``passwordRole``, which
/// needs its password (SCRAM), so URLs with passwords are tested for real. Nothing listens
/// beyond loopback.
///
/// ``start()`` throws `XCTSkip` when no PostgreSQL binaries exist, except under `CI=true`,
/// where `.ci/run` installs apt `postgresql` and a missing server is a failure. Call
/// ``stop()`` in `tearDown` (it stops with `-m immediate` and removes the directory); it also
/// runs from `deinit`.
public final class PostgresServer: @unchecked Sendable {
    /// The port the server listens on, on 127.0.0.1.
    public let port: Int
    /// The superuser, trusted from 127.0.0.1 without a password.
    public let superuser = "postgres"
    /// A role that logs in with ``password`` only.
    public let passwordRole = "broker_pw"
    /// ``passwordRole``'s password; it holds URL-special characters on purpose.
    public let password = "p@ss:w/rd%?#"
    /// The temporary directory holding the data directory, socket and log.
    public let directory: String
    private let binaries: String
    private let runAsPostgres: Bool
    private let lock = NSLock()
    private var stopped = false

    private var dataDirectory: String { "\(directory)/data" }
    private var logFile: String { "\(directory)/server.log" }

    private init(port: Int, directory: String, binaries: String, runAsPostgres: Bool) {
        self.port = port
        self.directory = directory
        self.binaries = binaries
        self.runAsPostgres = runAsPostgres
    }

    deinit { stop() }

    /// The directory of the newest installed PostgreSQL's binaries, if any.
    public static func binaryDirectory() -> String? {
        let root = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return versions
            .compactMap { version -> (Int, String)? in
                let bin = "\(root)/\(version)/bin"
                guard let number = Int(version.split(separator: ".").first ?? ""),
                      FileManager.default.isExecutableFile(atPath: "\(bin)/initdb"),
                      FileManager.default.isExecutableFile(atPath: "\(bin)/pg_ctl")
                else { return nil }
                return (number, bin)
            }
            .max { $0.0 < $1.0 }?.1
    }

    /// Creates a cluster in a temporary directory and starts it.
    public static func start(file: StaticString = #filePath, line: UInt = #line) throws -> PostgresServer {
        guard let binaries = binaryDirectory() else {
            throw missingPrerequisite(
                "no PostgreSQL binaries under /usr/lib/postgresql/*/bin (install apt postgresql to run these tests)", file: file, line: line)
        }
        return try onAFreePort { port in try create(port: port, binaries: binaries) }
    }

    /// Creates a cluster listening on `port` in a temporary directory and starts it.
    private static func create(port: Int, binaries: String) throws -> PostgresServer {
        let runAsPostgres = geteuid() == 0
        let directory = try makeDirectory("broker-pg", runAsPostgres: runAsPostgres)
        let server = PostgresServer(port: port, directory: directory, binaries: binaries, runAsPostgres: runAsPostgres)
        do {
            try server.run("initdb", ["-D", server.dataDirectory, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            let hba = """
                local all all trust
                host all \(server.passwordRole) 127.0.0.1/32 scram-sha-256
                host all all 127.0.0.1/32 trust
                host replication all 127.0.0.1/32 trust
                """
            try server.writeAsOwner(hba + "\n", to: "\(server.dataDirectory)/pg_hba.conf")
            let settings = """
                listen_addresses = '127.0.0.1'
                port = \(server.port)
                unix_socket_directories = '\(directory)'
                password_encryption = 'scram-sha-256'
                max_connections = 100
                shared_buffers = 16MB
                """
            try server.appendAsOwner("\n" + settings + "\n", to: "\(server.dataDirectory)/postgresql.conf")
            try server.startServer()
            let escaped = server.password.replacingOccurrences(of: "'", with: "''")
            try server.psql("CREATE ROLE \(server.passwordRole) LOGIN PASSWORD '\(escaped)'")
        } catch {
            server.stop()
            throw error
        }
        return server
    }

    /// Starts a hot standby of this server (`pg_basebackup -R`, streaming from it) in a
    /// directory of its own on a free port: it answers reads and refuses writes (SQLSTATE
    /// 25006), like the old primary a failover leaves a URL on. Stop it with ``stop()``.
    public func startStandby() throws -> PostgresServer {
        try onAFreePort { port in
            let directory = try Self.makeDirectory("broker-pg-standby", runAsPostgres: runAsPostgres)
            let standby = PostgresServer(port: port, directory: directory, binaries: binaries, runAsPostgres: runAsPostgres)
            do {
                try standby.run("pg_basebackup", [
                    "-h", "127.0.0.1", "-p", "\(self.port)", "-U", superuser, "-D", standby.dataDirectory, "-R", "-X", "stream", "-c", "fast", "--no-sync",
                ])
                try standby.appendAsOwner(
                    "\nport = \(port)\nunix_socket_directories = '\(directory)'\n", to: "\(standby.dataDirectory)/postgresql.conf")
                try standby.startServer()
            } catch {
                standby.stop()
                throw error
            }
            return standby
        }
    }

    /// Turns TLS on with `certificates`' server certificate and key (copied into the data
    /// directory for the server's user, the key readable by it alone), then reloads the
    /// configuration: plain connections keep working, TLS ones are offered the certificate.
    public func enableTLS(_ certificates: TestCertificates) throws {
        let certificate = "\(dataDirectory)/server.crt", key = "\(dataDirectory)/server.key"
        try writeAsOwner(String(contentsOfFile: certificates.certificateFile, encoding: .utf8), to: certificate)
        try writeAsOwner(String(contentsOfFile: certificates.keyFile, encoding: .utf8), to: key)
        guard chmod(key, 0o600) == 0 else { throw PostgresServerError(message: "chmod of \(key) failed: errno \(errno)") }
        try psql("ALTER SYSTEM SET ssl = on")
        try psql("SELECT pg_reload_conf()")
    }

    /// Starts the stopped server again on the same port and data directory.
    public func startServer() throws {
        try run("pg_ctl", ["-D", dataDirectory, "-l", logFile, "-w", "-t", "60", "start"])
    }

    /// Stops the server at once (`-m immediate`: like a crash; committed data is kept).
    public func stopServer() throws {
        try run("pg_ctl", ["-D", dataDirectory, "-w", "-t", "60", "-m", "immediate", "stop"])
    }

    /// Restarts the server (`-m fast`), closing every client connection.
    public func restart() throws {
        try run("pg_ctl", ["-D", dataDirectory, "-l", logFile, "-w", "-t", "60", "-m", "fast", "restart"])
    }

    /// Creates a database owned by ``passwordRole`` and returns its name; with `icuLocale`,
    /// its collation is that ICU locale's (`en`: `a` before `B`, unlike their bytes), else the
    /// server's `C.UTF-8` (byte order).
    @discardableResult
    public func createDatabase(
        _ name: String = "broker_\(UUID().uuidString.prefix(8).lowercased())", icuLocale: String? = nil
    ) throws -> String {
        let collation = icuLocale.map { " TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE '\($0)'" } ?? ""
        try psql("CREATE DATABASE \(name) OWNER \(passwordRole)\(collation)")
        return name
    }

    /// Runs SQL as the superuser through `psql` and returns its unaligned output.
    @discardableResult
    public func psql(_ sql: String, database: String = "postgres") throws -> String {
        try run("psql", ["-X", "-v", "ON_ERROR_STOP=1", "-A", "-t", "-h", "127.0.0.1", "-p", "\(port)", "-U", superuser, "-d", database, "-c", sql])
    }

    /// Runs a query of one value as the superuser and returns that value as psql prints it,
    /// without the line break after it.
    public func psqlValue(_ sql: String, database: String = "postgres") throws -> String {
        try psql(sql, database: database).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A plain-text `pg_dump` of `database`, with `bytea` columns in hex as PostgreSQL prints them.
    public func dump(_ database: String) throws -> String {
        try run("pg_dump", ["-h", "127.0.0.1", "-p", "\(port)", "-U", superuser, "--no-owner", database])
    }

    /// Stops the server (`-m immediate`) and removes the directory; safe to call twice.
    public func stop() {
        let first = lock.withLock { () -> Bool in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        _ = try? run("pg_ctl", ["-D", dataDirectory, "-w", "-t", "30", "-m", "immediate", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The server's log, for failure messages.
    public func log() -> String {
        (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
    }

    // MARK: Running commands

    @discardableResult
    private func run(_ tool: String, _ arguments: [String]) throws -> String {
        let process = Process()
        // Through a shell that closes every descriptor above 2 first: Foundation's Process
        // watches a socket it passes to the child for end-of-file, and `pg_ctl start`'s
        // server would otherwise inherit it and keep it open, so the start never "ended".
        let command = runAsPostgres
            ? ["/usr/sbin/runuser", "-u", "postgres", "--", "\(binaries)/\(tool)"] + arguments
            : ["\(binaries)/\(tool)"] + arguments
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [
            "-c", #"for fd in /proc/$$/fd/*; do n=${fd##*/}; if [ "$n" -gt 2 ]; then eval "exec $n>&-" 2>/dev/null; fi; done; exec "$@""#,
            "postgres-server",
        ] + command
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        var environment = ProcessInfo.processInfo.environment
        environment["LC_ALL"] = "C.UTF-8"
        environment["PGCONNECT_TIMEOUT"] = "10"
        process.environment = environment
        // Output goes to a file, not a pipe: `pg_ctl start` leaves the server running with
        // whatever descriptors it inherited, and a pipe would then never reach end-of-file.
        let outputPath = "\(directory)/command-\(UUID().uuidString.prefix(8)).out"
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil, attributes: [.posixPermissions: 0o666])
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        try? output.close()
        let data = FileManager.default.contents(atPath: outputPath) ?? Data()
        let text = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw PostgresServerError(message: "\(tool) \(arguments.prefix(3).joined(separator: " ")) … exited with \(process.terminationStatus): \(text.suffix(800))\nserver log: \(log().suffix(800))")
        }
        return text
    }

    private func writeAsOwner(_ text: String, to path: String) throws {
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        try chownToPostgres(path)
    }

    private func appendAsOwner(_ text: String, to path: String) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(text.utf8))
    }

    private func chownToPostgres(_ path: String) throws {
        guard runAsPostgres else { return }
        try Self.giveToPostgres(path)
    }

    /// A new 0700 temporary directory named `prefix-XXXXXXXX`, given to the postgres user when
    /// the server runs as it; removed again if that fails.
    private static func makeDirectory(_ prefix: String, runAsPostgres: Bool) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        guard runAsPostgres else { return directory }
        do {
            try giveToPostgres(directory)
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
        return directory
    }

    /// Makes the postgres user own `path` (the server runs as postgres when the tests run as root).
    private static func giveToPostgres(_ path: String) throws {
        guard let account = getpwnam("postgres") else {
            throw PostgresServerError(message: "running as root, but there is no postgres user to run PostgreSQL as")
        }
        guard chown(path, account.pointee.pw_uid, account.pointee.pw_gid) == 0 else {
            throw PostgresServerError(message: "chown of \(path) to postgres failed: errno \(errno)")
        }
    }
}

/// Why the test PostgreSQL could not be used.
public struct PostgresServerError: Error, CustomStringConvertible {
    /// What went wrong.
    public var message: String
    /// The message.
    public var description: String { message }
    /// Creates an error with `message`.
    public init(message: String) { self.message = message }
}
