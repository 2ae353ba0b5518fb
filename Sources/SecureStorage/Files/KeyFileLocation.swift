#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Where a storage layout keeps each access group's key file and salt, and how it checks and
/// creates them; ``KeySource`` resolution works on any layout through it.
protocol KeyFileLocation: Sendable {
    func keyFilePath(_ group: AccessGroup) -> String
    func saltPath(_ group: AccessGroup) -> String
    /// Throws ``KeystoreError/Code/insecurePermissions`` for a file looser than the layout allows.
    func checkKeyFile(_ info: stat, path: String, shared: Bool) throws
    /// Creates `path` holding `bytes` only when it does not exist yet, atomically and durably,
    /// so concurrent creators agree on one file. Returns `false` when another file won.
    func createKeyFile(_ bytes: [UInt8], at path: String, group: AccessGroup) throws -> Bool
}
