public import Logging

/// The embedded ``Keystore``: AES-256-GCM sealed items in files under a root directory,
/// namespaced by service name and ``AccessGroup``.
///
/// ```swift
/// let keystore = try FileKeystore(
///     root: "/var/lib/my-tool/identity-broker",
///     service: "my-tool",
///     accessGroup: .none,
///     logger: logger
/// )
/// try keystore.set(Array("value".utf8), forKey: "session.alice")
/// let value = try keystore.data(forKey: "session.alice")
/// ```
///
/// Opening a keystore creates and checks its directories (refusing looser permissions than
/// 0700 for a private namespace or 0770 for a shared group), resumes any interrupted migration,
/// and, when the service last used another access group and ``AccessGroup/migrateItemsOfUserSession``
/// is on, moves its items into the configured group; when any of them does not open (wrong
/// key, tampered, corrupt), the initializer throws and nothing is moved (see
/// ``migrate(root:service:from:to:keySource:lockTimeout:logger:)``). The key is resolved
/// once, at open.
///
/// Reads take no lock and always see a whole item, old or new. Writes are atomic and durable
/// (temporary file, fsync, rename, directory fsync) and serialised across threads and
/// processes by an advisory lock per namespace. A `FileKeystore` is immutable and can be
/// shared freely between tasks.
public final class FileKeystore: SynchronousKeystore {
    /// The root directory all namespaces live under.
    public let root: String
    /// The service (tool) name this keystore belongs to.
    public let service: String
    /// The access group this keystore reads and writes.
    public let accessGroup: AccessGroup

    let namespace: Namespace
    let key: SecretBytes
    let logger: Logger?

    /// The default time a writer waits for the namespace lock: 10 seconds.
    public static let defaultLockTimeout: Duration = .seconds(10)

    /// Opens (creating on first use) the keystore for `service` in `accessGroup` under `root`.
    ///
    /// - Parameters:
    ///   - root: The keystore root directory; created 0700 (0770+setgid for a shared group)
    ///     when missing; refused when accessible to others.
    ///   - service: The name of the tool owning the items; non-empty, at most 150 bytes.
    ///   - accessGroup: Where the items live; see ``AccessGroup``.
    ///   - keySource: Where the 256-bit key comes from; a key file per group by default.
    ///   - lockTimeout: How long a writer waits for the namespace lock before throwing
    ///     ``KeystoreError/Code/lockTimeout``.
    ///   - logger: A logger for debug and notice messages; never given a secret.
    /// - Throws: ``KeystoreError``.
    public init(
        root: String,
        service: String,
        accessGroup: AccessGroup = .none,
        keySource: KeySource = .keyFile,
        lockTimeout: Duration = FileKeystore.defaultLockTimeout,
        logger: Logger? = nil
    ) throws {
        try CryptoRuntime.ensureInitialised()
        if let name = accessGroup.name {
            try KeystoreLayout.validate(name: name, what: "access group name", limit: KeystoreLayout.maximumNameBytes)
        }
        let layout = try KeystoreLayout(root: root, service: service)
        let migrator = Migrator(layout: layout, keySource: keySource, lockTimeout: lockTimeout, logger: logger)
        let shared = accessGroup.isShared
        try layout.prepareRoot(shared: shared)
        try NamespaceLock(path: layout.serviceLockPath, mode: KeystoreLayout.fileMode(shared: shared), timeout: lockTimeout).withLock {
            try migrator.resumeIfNeeded()
            let last = try layout.readLastGroup()
            if let last, !last.sameLocation(as: accessGroup) {
                if accessGroup.migrateItemsOfUserSession {
                    try migrator.migrate(from: last, to: accessGroup)
                } else {
                    logger?.notice("access group changed without migration; previous items left in place", metadata: [
                        "broker.service": "\(service)",
                        "broker.fromGroup": "\(last)",
                        "broker.accessGroup": "\(accessGroup)",
                    ])
                }
            }
            if last.map({ !$0.sameLocation(as: accessGroup) }) ?? true {
                try layout.writeLastGroup(accessGroup, shared: shared)
            }
        }
        try layout.prepareNamespace(accessGroup, create: true)
        guard let key = try keySource.resolveKey(for: accessGroup, layout: layout, create: true) else {
            throw KeystoreError(.invalidKey, "no key available for the access group")
        }
        let namespace = Namespace(layout: layout, group: accessGroup, lockTimeout: lockTimeout)
        _ = try namespace.lock.withLockIfAvailable { try namespace.sweepTemporaryFiles() }

        self.root = layout.root
        self.service = service
        self.accessGroup = accessGroup
        self.namespace = namespace
        self.key = key
        self.logger = logger
        logger?.debug("keystore opened", metadata: [
            "broker.service": "\(service)",
            "broker.accessGroup": "\(accessGroup)",
            "broker.keySource": "\(keySource)",
        ])
    }

    /// Returns the value stored under `key`, or `nil` when there is none.
    ///
    /// - Throws: ``KeystoreError/Code/authenticationFailed`` when the item was tampered with,
    ///   moved from another name, service or group, or sealed with another key;
    ///   ``KeystoreError/Code/corruptFormat`` for a truncated item or unknown format version.
    public func data(forKey key: String) throws -> [UInt8]? {
        try Namespace.validate(key: key)
        guard let sealed = try namespace.readSealed(forKey: key) else { return nil }
        return try namespace.open(sealed, forKey: key, with: self.key)
    }

    /// Seals `value` and stores it under `key`, atomically and durably: a crash at any moment
    /// leaves either the previous value or the new one.
    public func set(_ value: [UInt8], forKey key: String) throws {
        try Namespace.validate(key: key)
        let sealed = try namespace.seal(value, forKey: key, with: self.key)
        try namespace.lock.withLock {
            try POSIX.atomicWrite(sealed, to: namespace.itemPath(forKey: key), directory: namespace.directory, mode: namespace.fileMode)
        }
        logger?.trace("keystore item written", metadata: ["broker.service": "\(service)", "broker.item": "\(key)"])
    }

    /// Removes the item stored under `key`, durably; succeeds when there is none.
    public func remove(forKey key: String) throws {
        try Namespace.validate(key: key)
        try namespace.lock.withLock {
            if try POSIX.removeFile(namespace.itemPath(forKey: key)) {
                try POSIX.fsyncDirectory(namespace.directory)
            }
        }
        logger?.trace("keystore item removed", metadata: ["broker.service": "\(service)", "broker.item": "\(key)"])
    }

    /// Removes every item of this service in this access group, durably. Other services and
    /// other groups are untouched.
    public func removeAll() throws {
        let count = try namespace.lock.withLock { () throws -> Int in
            let keys = try namespace.itemKeys()
            for key in keys { try POSIX.removeFile(namespace.itemPath(forKey: key)) }
            try namespace.sweepTemporaryFiles()
            try POSIX.fsyncDirectory(namespace.directory)
            return keys.count
        }
        logger?.debug("keystore cleared", metadata: ["broker.service": "\(service)", "broker.itemCount": "\(count)"])
    }

    /// The keys of every item of this service in this access group, sorted.
    public func keys() throws -> [String] {
        try namespace.itemKeys().sorted()
    }
}
