import FederateCLI
import Logging
import PostgresKeystore
import SecureStorage
import Synchronization

/// A `postgres://` (or `postgresql://`) keystore: the parsed URL, its password (from the URL,
/// else from libpq's password file, ``PostgresPassFile``) registered with ``Terminal`` so no
/// stderr line can show it.
struct PostgresURL: PostgresTarget {
    let configuration: PostgresKeystore.Configuration
    /// Why the password file was not used, when it exists but is not: told only if the
    /// database then cannot be used (a failure stays one line; a server that needs no
    /// password makes it moot).
    private let passFileIgnored: String?

    init(url: String) throws(CLIFailure) {
        var configuration: PostgresKeystore.Configuration
        do {
            configuration = try PostgresKeystore.Configuration(url: url)
        } catch {
            // The reason never holds the password, and the URL is not repeated.
            throw CLIFailure(.usage, "--keystore: the PostgreSQL URL cannot be used: \(error.reason); pass postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=MODE] (docs/cli.md, PostgreSQL keystores)")
        }
        if let roots = configuration.rootCertificatePath {
            // A local file, not the server: said as bad input (exit 2), not as a database
            // that cannot be reached.
            if let reason = ReadableFile.problem(at: roots) {
                throw CLIFailure(
                    .usage,
                    "--keystore: sslrootcert \(roots) cannot be read (\(reason)); give a PEM file of the certificate authorities to trust")
            }
        }
        var passFileIgnored: String?
        if configuration.password?.isEmpty ?? true {
            // As libpq: a URL without a password takes one from the password file.
            let found = PostgresPassFile.lookup(
                home: KeystoreAccess.homeDirectory, environment: KeystoreAccess.environment,
                host: configuration.host, port: configuration.port,
                database: configuration.database ?? configuration.username, user: configuration.username)
            switch found {
            case .none:
                break
            case .ignored(let reason):
                passFileIgnored = reason
            case .password(let password):
                configuration.password = password
            }
        }
        if let password = configuration.password, !password.isEmpty { Terminal.neverShow(password) }
        if let keyFile = KeystoreAccess.environment(KeySelection.keyFileVariable) {
            configuration.keyFilePath = keyFile
        }
        self.configuration = configuration
        self.passFileIgnored = passFileIgnored
    }

    /// `failure`, saying why the password file was not used when it was not.
    func withPassFileNote(_ failure: CLIFailure) -> CLIFailure {
        guard let passFileIgnored else { return failure }
        var failure = failure
        failure.message += " (not used: \(passFileIgnored))"
        return failure
    }

    /// `postgres://user@host:port/db?sslmode=…`: never the password.
    var displayName: String { configuration.description }

    var keyFilePath: String? { configuration.keyFilePath }
}

extension PostgresURL {
    func open(
        service: String, accessGroup: AccessGroup, keySource: KeySource, use: KeystoreAccess.KeystoreUse, logger: Logger?
    ) async throws(CLIFailure) -> any Keystore {
        var configuration = configuration
        if use == .oneShot { configuration.minimumConnections = 0 }
        do {
            let keystore = try await PostgresKeystore(
                configuration: configuration, service: service, accessGroup: accessGroup, keySource: keySource, logger: logger)
            OpenKeystores.register(keystore)
            return keystore
        } catch {
            throw withPassFileNote(CLIFailure.keystore(error, root: displayName))
        }
    }

    func openAndRead(
        key: String, service: String, accessGroup: AccessGroup, keySource: KeySource, logger: Logger?
    ) async throws(CLIFailure) -> Result<[UInt8]?, KeystoreError> {
        do {
            return try await PostgresKeystore.openAndRead(
                key: key, configuration: configuration, service: service, accessGroup: accessGroup, keySource: keySource, logger: logger)
        } catch {
            throw withPassFileNote(CLIFailure.keystore(error, root: displayName))
        }
    }

    func migrate(
        service: String, from source: AccessGroup, to destination: AccessGroup, keySource: KeySource, logger: Logger?, context: String
    ) async throws(CLIFailure) -> Int {
        do {
            return try await PostgresKeystore.migrate(
                configuration: configuration, service: service, from: source, to: destination, keySource: keySource, logger: logger)
        } catch {
            throw withPassFileNote(CLIFailure.keystore(error, root: displayName, context: context))
        }
    }

    func rekey(
        service: String, group: AccessGroup, keySource: KeySource, logger: Logger?, context: String
    ) async throws(CLIFailure) -> KeyRotation {
        do {
            return try await PostgresKeystore.rekey(
                configuration: configuration, service: service, group: group, keySource: keySource, logger: logger)
        } catch {
            throw withPassFileNote(CLIFailure.keystore(error, root: displayName, context: context))
        }
    }
}
