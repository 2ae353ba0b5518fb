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

    /// Prepares directories, key and database; `nil` when `create` is off and the namespace
    /// (or its key) does not exist yet, so it holds no item.
    static func open(layout: StoreLayout, group: AccessGroup, keySource: KeySource, create: Bool) throws(KeystoreError) -> StoreNamespace? {
        try NameRules.validate(group: group)
        guard try layout.prepareDirectories(group, create: create),
              let path = try layout.prepareDatabase(group, create: create),
              let resolved = try KeystoreError.rethrowing({ try keySource.resolveKey(for: group, layout: layout, create: create) })
        else { return nil }
        return StoreNamespace(
            group: group, databasePath: path, keys: KeyRing(sealing: resolved.key, opening: resolved.opening), binding: ItemBinding(service: layout.service, group: group),
            headerlessSharedSalt: resolved.headerlessSharedSalt)
    }

    /// Opens a writer connection with the schema installed and checked.
    ///
    /// Several processes opening a new database at once race on switching it to WAL, and
    /// SQLite answers that race with SQLITE_BUSY at once, without its busy handler: so the
    /// install is retried, with a growing pause, until the busy timeout has passed.
    func connect(service: String, busyTimeout: Duration) throws(KeystoreError) -> SQLiteConnection {
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
