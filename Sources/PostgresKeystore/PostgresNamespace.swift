import SecureStorage

/// One (service, access group) namespace of the PostgreSQL engine: its column values, its key
/// and its item binding (the same associated data as the SQLite engine's, so a row moved to
/// another key, service or group fails to open).
struct PostgresNamespace: Sendable {
    let service: String
    let group: AccessGroup
    let key: SecretBytes
    let binding: ItemBinding

    /// The longest service or access-group name, in UTF-8 bytes (as the SQLite engine).
    static let maximumNameBytes = 150
    /// The longest item key, in UTF-8 bytes (as the SQLite engine).
    static let maximumKeyBytes = 180

    init(service: String, group: AccessGroup, key: SecretBytes) {
        self.service = service
        self.group = group
        self.key = key
        self.binding = ItemBinding(service: service, group: group)
    }

    /// The `access_group` column: the group's name, or the empty string for
    /// ``AccessGroup/none`` (a named group is never empty).
    var groupColumn: String { Self.column(for: group) }

    static func column(for group: AccessGroup) -> String { group.name ?? "" }

    /// What a commit's `NOTIFY` carries, so listeners of other namespaces skip it at once:
    /// the service's length in bytes, a colon, the service, then the group column.
    var notificationPayload: String { "\(service.utf8.count):\(service)\(groupColumn)" }

    /// The name hashed into the transaction-scoped advisory lock that orders this namespace's
    /// commits, so change rows are numbered in commit order.
    var lockName: String { "identity_broker:\(notificationPayload)" }

    func seal(_ value: [UInt8], forKey key: String) throws(KeystoreError) -> [UInt8] {
        try KeystoreError.rethrowing { try Sealing.seal(value, key: self.key, associatedData: binding.associatedData(forKey: key)) }
    }

    /// Opens one row; a failure names the key and concerns that item alone.
    func open(_ sealed: [UInt8], forKey key: String) throws(KeystoreError) -> [UInt8] {
        do {
            return try Sealing.open(sealed, key: self.key, associatedData: binding.associatedData(forKey: key))
        } catch let error as KeystoreError {
            throw KeystoreError(error.code, "item '\(key)': \(error.reason)", openSSLError: error.openSSLError)
        } catch {
            throw KeystoreError(.cryptoFailure, "item '\(key)' could not be opened")
        }
    }

    static func validate(key: String) throws(KeystoreError) {
        try validate(name: key, what: "item key", limit: maximumKeyBytes)
    }

    static func validate(service: String, group: AccessGroup) throws(KeystoreError) {
        try validate(name: service, what: "service name", limit: maximumNameBytes)
        if let name = group.name {
            try validate(name: name, what: "access group name", limit: maximumNameBytes)
        }
    }

    /// Non-empty, at most `limit` bytes, and no NUL (PostgreSQL text cannot hold one).
    private static func validate(name: String, what: String, limit: Int) throws(KeystoreError) {
        let count = name.utf8.count
        guard count > 0 else { throw KeystoreError(.invalidName, "the \(what) is empty") }
        guard count <= limit else { throw KeystoreError(.invalidName, "the \(what) is longer than \(limit) bytes") }
        guard !name.utf8.contains(0) else { throw KeystoreError(.invalidName, "the \(what) contains a NUL character") }
    }
}
