import SecureStorage

/// The server a connection reached is a standby (`pg_is_in_recovery()`): a hot standby, or
/// the old primary a failover demoted while the URL still leads to it.
struct StandbyServer: Error, CustomStringConvertible {
    var description: String {
        "\(KeystoreError.standbyServerReason), which takes no writes; the URL must reach the primary (after a failover, the new one)"
    }
}

/// The server is older than ``ConnectionSetup/oldestServerVersion``.
struct UnsupportedServer: Error, CustomStringConvertible {
    /// Its `server_version_num`.
    let version: Int32
    var description: String {
        "the server is PostgreSQL \(version / 10000) (server_version_num \(version)); the keystore needs PostgreSQL 12 or later"
    }
}
