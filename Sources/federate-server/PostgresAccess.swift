import FederateCLI
import Logging
import PostgresKeystore
import SecureStorage
import Synchronization

/// A `postgres://` (or `postgresql://`) keystore: the parsed URL, its password registered
/// with ``Terminal`` so no stderr line can show it.
struct PostgresURL: PostgresTarget {
    let configuration: PostgresKeystore.Configuration

    init(url: String) throws(CLIFailure) {
        var configuration: PostgresKeystore.Configuration
        do {
            configuration = try PostgresKeystore.Configuration(url: url)
        } catch {
            // The reason never holds the password, and the URL is not repeated.
            throw CLIFailure(.usage, "--keystore: the PostgreSQL URL cannot be used: \(error.reason); pass postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=MODE] (docs/cli.md, PostgreSQL keystores)")
        }
        if let password = configuration.password, !password.isEmpty { Terminal.neverShow(password) }
        if let keyFile = KeystoreAccess.environment(KeySelection.keyFileVariable) {
            configuration.keyFilePath = keyFile
        }
        self.configuration = configuration
    }

    /// `postgres://user@host:port/db?sslmode=…`: never the password.
    var displayName: String { configuration.description }

    var keyFilePath: String? { configuration.keyFilePath }
}

extension PostgresURL {
    func open(service: String, accessGroup: AccessGroup, keySource: KeySource, logger: Logger?) async throws(CLIFailure) -> any Keystore {
        do {
            let keystore = try await PostgresKeystore(
                configuration: configuration, service: service, accessGroup: accessGroup, keySource: keySource, logger: logger)
            OpenKeystores.register(keystore)
            return keystore
        } catch {
            throw CLIFailure.keystore(error, root: displayName)
        }
    }

    func migrate(
        service: String, from source: AccessGroup, to destination: AccessGroup, keySource: KeySource, logger: Logger?, context: String
    ) async throws(CLIFailure) -> Int {
        do {
            return try await PostgresKeystore.migrate(
                configuration: configuration, service: service, from: source, to: destination, keySource: keySource, logger: logger)
        } catch {
            throw CLIFailure.keystore(error, root: displayName, context: context)
        }
    }
}

/// The PostgreSQL keystores this process opened: ``closeAll()`` ends their connection pools
/// before the process exits (``FederateServer/closeKeystores()``, and `exec` before it
/// passes on its command's status).
enum OpenKeystores {
    private static let opened = Mutex<[PostgresKeystore]>([])

    static func register(_ keystore: PostgresKeystore) {
        opened.withLock { $0.append(keystore) }
    }

    /// Closes every registered keystore; returns at once when there is none.
    static func closeAll() async {
        let keystores = opened.withLock { list in
            defer { list.removeAll() }
            return list
        }
        for keystore in keystores { await keystore.close() }
    }
}
