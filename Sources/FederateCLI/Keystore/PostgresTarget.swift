package import Logging
package import SecureStorage

/// A `postgres://` (or `postgresql://`) keystore as `federate-server` parsed it: its password
/// is registered with ``Terminal`` before anything can print it.
package protocol PostgresTarget: Sendable {
    /// `postgres://user@host:port/db?sslmode=…`: never the password.
    var displayName: String { get }
    /// `$IDENTITY_BROKER_KEY_FILE`, when set.
    var keyFilePath: String? { get }
    /// Opens (creating the schema on first use) the keystore for `use`; the process closes it
    /// before exiting.
    func open(
        service: String, accessGroup: AccessGroup, keySource: KeySource, use: KeystoreAccess.KeystoreUse, logger: Logger?
    ) async throws(CLIFailure) -> any Keystore
    /// Opens the keystore and reads the item under `key` on one connection (one login), for a
    /// command that reads one session and exits; the read's own outcome apart from the
    /// opening's failures, which it throws.
    func openAndRead(
        key: String, service: String, accessGroup: AccessGroup, keySource: KeySource, logger: Logger?
    ) async throws(CLIFailure) -> Result<[UInt8]?, KeystoreError>
    /// Rotates the key of access group `group` to `keySource`'s sealing key; what it did.
    func rekey(
        service: String, group: AccessGroup, keySource: KeySource, logger: Logger?, context: String
    ) async throws(CLIFailure) -> KeyRotation
    /// Moves every saved session from access group `source` to `target`; how many moved.
    func migrate(
        service: String, from source: AccessGroup, to target: AccessGroup, keySource: KeySource, logger: Logger?, context: String
    ) async throws(CLIFailure) -> Int
}
