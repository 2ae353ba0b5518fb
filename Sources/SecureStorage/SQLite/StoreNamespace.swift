#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One (root, service, access group) namespace of the SQLite engine, resolved: its checked
/// database, its key and its item binding. Opening one creates what is missing when asked.
struct StoreNamespace: Sendable {
    let group: AccessGroup
    let databasePath: String
    let keys: KeyRing
    let binding: ItemBinding
    /// See ``ResolvedKey/headerlessSharedSalt``: ``verifyKey(on:service:)`` refuses the key
    /// for a namespace without items.
    var headerlessSharedSalt: String? = nil

    /// What opening a namespace may create.
    enum Creation {
        /// Nothing: opening gives `nil` when anything is missing, so the namespace holds no item.
        case nothing
        /// The directories and the database; the key file (or passphrase salt) only while the
        /// database holds nothing sealed. A missing key over sealed items is a key mistake (the
        /// environment key or passphrase not set, the key file deleted), not a first use: making
        /// one would leave a key that opens nothing, and every later open would use it.
        case whatIsMissing(busyTimeout: Duration)
        /// As ``whatIsMissing(busyTimeout:)``, and the key over sealed items too: a rotation
        /// that has opened them with another key makes its new sealing key.
        case sealingKeyOverProvenItems

        var createsFiles: Bool {
            if case .nothing = self { return false }
            return true
        }
    }

    /// Prepares directories, key and database as `creation` allows; `nil` when it allows
    /// nothing and the namespace (or its key) does not exist yet, so it holds no item.
    static func open(layout: StoreLayout, group: AccessGroup, keySource: KeySource, create creation: Creation) throws(KeystoreError) -> StoreNamespace? {
        try NameRules.validate(group: group)
        guard let path = try layout.prepareNamespaceFiles(group, create: creation.createsFiles) else { return nil }
        var resolved = try KeystoreError.rethrowing { try keySource.resolveKey(for: group, layout: layout, create: false) }
        if resolved == nil, creation.createsFiles {
            if case .whatIsMissing(let busyTimeout) = creation, try holdsSealedData(databasePath: path, busyTimeout: busyTimeout) {
                // Another process opening the namespace at the same time may have made its key
                // and sealed the check since the first look: it makes the key before sealing
                // anything, so the key is there now unless it is missing for good.
                resolved = try KeystoreError.rethrowing { try keySource.resolveKey(for: group, layout: layout, create: false) }
                guard resolved != nil else { throw missingKey(group: group, keySource: keySource, layout: layout) }
            } else {
                resolved = try KeystoreError.rethrowing { try keySource.resolveKey(for: group, layout: layout, create: true) }
            }
        }
        guard let resolved else { return nil }
        return StoreNamespace(
            group: group, databasePath: path, keys: KeyRing(sealing: resolved.key, opening: resolved.opening), binding: ItemBinding(service: layout.service, group: group),
            headerlessSharedSalt: resolved.headerlessSharedSalt)
    }

    /// Whether the database holds a key check or an item: anything sealed with a key.
    private static func holdsSealedData(databasePath: String, busyTimeout: Duration) throws(KeystoreError) -> Bool {
        let connection = try SQLiteConnection(path: databasePath, busyTimeout: busyTimeout)
        defer { connection.close() }
        return try StoreSchema.holdsSealedData(on: connection)
    }

    /// ``KeystoreError/Code/invalidKey`` for a key file (or salt) missing where the database
    /// holds something sealed: its key cannot be one made now.
    private static func missingKey(group: AccessGroup, keySource: KeySource, layout: StoreLayout) -> KeystoreError {
        let label = KeyCheck.describe(service: layout.service, group: group)
        let missing: String
        let path: String
        if case .passphrase = keySource.kind {
            (missing, path) = ("the passphrase's salt file", layout.saltPath(group))
        } else {
            (missing, path) = ("the key file", layout.keyFilePath(group))
        }
        return KeystoreError(
            .invalidKey,
            "\(missing) of \(label) does not exist, but its database holds a key check or items sealed with a key: "
                + "\(KeystoreError.wrongKeyReason) are sealed with, and \(KeystoreError.keyMissingReason)",
            path: path)
    }

    /// Opens a writer connection with the schema installed and checked.
    func connect(service: String, busyTimeout: Duration) throws(KeystoreError) -> SQLiteConnection {
        try Self.connect(databasePath: databasePath, group: group, service: service, busyTimeout: busyTimeout)
    }

    /// Opens a writer connection to `group`'s database at `databasePath`, with the schema
    /// installed and checked; no key is needed (the private database's plain records, such as
    /// the last access group, are read and written this way by a named group's open).
    ///
    /// Several processes opening a new database at once race on switching it to WAL, and
    /// SQLite answers that race with SQLITE_BUSY at once, without its busy handler: so the
    /// install is retried, with a growing pause, until the busy timeout has passed.
    static func connect(databasePath: String, group: AccessGroup, service: String, busyTimeout: Duration) throws(KeystoreError) -> SQLiteConnection {
        let connection = try SQLiteConnection(path: databasePath, busyTimeout: busyTimeout)
        let deadline = ContinuousClock.now.advanced(by: busyTimeout)
        var pause: Duration = .milliseconds(2)
        while true {
            do {
                try StoreSchema.install(on: connection, service: service, group: group)
                return connection
            } catch where error.code == .storeUnavailable && ContinuousClock.now < deadline {
                connection.rollback()
                Self.sleep(pause)
                pause = min(pause * 2, .milliseconds(100))
            }
        }
    }

    private static func sleep(_ duration: Duration) {
        let microseconds = duration.wholeMicroseconds
        usleep(UInt32(clamping: microseconds))
    }

    func seal(_ value: [UInt8], forKey key: String) throws(KeystoreError) -> [UInt8] {
        try binding.seal(value, with: keys.sealing, forKey: key)
    }

    /// Opens one sealed row; a failure names the key and the database, and concerns that item
    /// alone.
    func open(_ sealed: [UInt8], forKey key: String) throws(KeystoreError) -> [UInt8] {
        try keys.open(sealed, binding: binding, forKey: key, path: databasePath).value
    }

    static func validate(key: String) throws(KeystoreError) {
        try NameRules.validate(key: key)
    }
}
