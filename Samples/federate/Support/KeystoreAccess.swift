import Federation
import Logging
import SecureStorage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the CLI keeps sessions, and how it opens them.
///
/// - Root: `--keystore`, else `$IDENTITY_BROKER_KEYSTORE`, else `$XDG_DATA_HOME/identity-broker`
///   (an absolute `XDG_DATA_HOME` only, per the XDG spec), else `$HOME/.local/share/identity-broker`
///   (the password database's home when `HOME` is unset).
/// - Key: `$IDENTITY_BROKER_KEY` (canonical base64 of 32 bytes) when set and non-empty, else the key file
///   the keystore keeps per access group.
/// - Namespace: service ``service``, access group `--access-group` (private when omitted).
struct KeystoreAccess {
    /// The fixed service name the CLI's items live under.
    static let service = "identity-broker"
    /// The environment variable naming the keystore directory.
    static let keystoreVariable = "IDENTITY_BROKER_KEYSTORE"

    let root: String
    let accessGroup: AccessGroup
    let keySource: KeySource
    let logger: Logger?

    init(_ options: CommonOptions) throws(CLIFailure) {
        root = try Self.resolveRoot(explicit: options.keystore)
        accessGroup = Self.group(options.accessGroup)
        keySource = Self.keySource()
        logger = options.logger
    }

    /// `nil` or `none` → private; anything else a named group (no migration on open:
    /// moving items is `federate migrate`'s job).
    static func group(_ name: String?) -> AccessGroup {
        guard let name, name != "none" else { return .none }
        return AccessGroup(name: name)
    }

    static func keySource() -> KeySource {
        if let value = getenv(KeySource.defaultEnvironmentVariable), value.pointee != 0 {
            Terminal.neverShow(String(cString: value))
            return .environment()
        }
        return .keyFile
    }

    static func resolveRoot(explicit: String?) throws(CLIFailure) -> String {
        if let explicit { return explicit }
        if let value = environment(keystoreVariable) { return value }
        if let data = environment("XDG_DATA_HOME"), data.hasPrefix("/") { return data + "/identity-broker" }
        if let home = environment("HOME") ?? passwordHome() { return home + "/.local/share/identity-broker" }
        throw CLIFailure(.usage, "no keystore directory: HOME is not set; pass --keystore DIR or set \(keystoreVariable)")
    }

    /// Whether the keystore root exists at all; reading commands then skip creating it.
    var rootExists: Bool {
        var info = stat()
        return stat(root, &info) == 0
    }

    /// Opens (creating on first use) the keystore.
    func open() throws(CLIFailure) -> SQLiteKeystore {
        do {
            return try SQLiteKeystore(root: root, service: Self.service, accessGroup: accessGroup, keySource: keySource, logger: logger)
        } catch {
            throw CLIFailure.keystore(error, root: root)
        }
    }

    /// A client that federates with `configuration` over the opened keystore.
    func client(configuration: FederationConfiguration) throws(CLIFailure) -> FederationClient {
        let keystore = try open()
        do {
            return try FederationClient(configuration: configuration, keystore: keystore, logger: logger)
        } catch {
            throw CLIFailure.federation(error, root: root)
        }
    }

    /// A client for the commands that never reach the network (`credentials`, `status`,
    /// `clear`): it reads saved sessions without any pool configuration.
    func offlineClient(expiryMargin: Duration) throws(CLIFailure) -> FederationClient {
        FederationClient(keystore: try open(), expiryMargin: expiryMargin, logger: logger)
    }

    /// The saved `session`; when the keystore root does not exist yet, `notFederated`,
    /// and nothing is created. A damaged item fails this session only (exit 6).
    func savedSession(_ session: String, expiryMargin: Duration) async throws(CLIFailure) -> SessionSnapshot {
        guard rootExists else { return SessionSnapshot(name: session, state: .notFederated) }
        let client = try offlineClient(expiryMargin: expiryMargin)
        do {
            return try await client.session(session)
        } catch {
            throw CLIFailure.federation(error, root: root)
        }
    }

    private static func environment(_ name: String) -> String? {
        guard let value = getenv(name), value.pointee != 0 else { return nil }
        return String(cString: value)
    }

    private static func passwordHome() -> String? {
        guard let entry = getpwuid(getuid()), let directory = entry.pointee.pw_dir, directory.pointee != 0 else { return nil }
        return String(cString: directory)
    }
}
