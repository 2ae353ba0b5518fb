/// An asynchronous store of small secret items, each named by a string key, shared by every
/// process and host that opens the same namespace.
///
/// `Keystore` is the storage interface the rest of IdentityBroker builds on. The embedded
/// ``SQLiteKeystore``, `PostgresKeystore` (its own product) and ``InMemoryKeystore``
/// implement it, and other backends can follow. Implementations are
/// `Sendable` and safe to use from any number of tasks at once.
///
/// Absence is not an error when reading: ``value(forKey:)`` returns `nil` for a missing item.
/// Every write goes through ``commit(_:)``, which applies a whole ``KeystoreBatch`` atomically
/// and durably; ``set(_:forKey:)``, ``set(_:forKey:version:)`` and ``remove(forKey:)`` are
/// one-operation batches. ``changes()`` reports keys changed by anyone sharing the store, so
/// caches over it can stay current.
public protocol Keystore: Sendable {
    /// The service (tool) whose items this keystore holds.
    var service: String { get }

    /// The access group this keystore reads and writes.
    var accessGroup: AccessGroup { get }

    /// Returns the value stored under `key`, or `nil` when there is none.
    ///
    /// - Throws: ``KeystoreError`` for this item alone when it exists but cannot be opened:
    ///   ``KeystoreError/Code/authenticationFailed`` (tampered, moved from another name or
    ///   group, sealed with another key) or ``KeystoreError/Code/corruptFormat``; other codes
    ///   when the store itself cannot be read.
    func value(forKey key: String) async throws(KeystoreError) -> [UInt8]?

    /// The keys of every item in this keystore's namespace, sorted.
    func keys() async throws(KeystoreError) -> [String]

    /// Applies every operation of `batch` in one atomic, durable commit.
    ///
    /// - Returns: For each operation of the batch, in order, whether it was applied: a
    ///   versioned set that lost to a newer stored version, or a remove of a missing item,
    ///   gives `false`.
    /// - Throws: ``KeystoreError`` when nothing of the batch was applied.
    @discardableResult
    func commit(_ batch: KeystoreBatch) async throws(KeystoreError) -> [Bool]

    /// The keys changed from now on by any process or host sharing the store, this instance
    /// included.
    ///
    /// A ``KeystoreChange/all`` element means the feed lost track of individual keys (its
    /// log was trimmed past the subscriber, the subscriber fell so far behind that its
    /// stream's buffer dropped changes, or the store was reopened): reload everything you
    /// hold. The stream ends when the keystore is closed.
    func changes() -> AsyncStream<KeystoreChange>

    /// How long a commit that failed with its outcome unknown (it timed out, or its
    /// connection was lost after it was sent) may still take effect after its caller was told
    /// it failed. Caches over the store re-read what such a commit wrote for this long, since
    /// their own commits never come back through ``changes()``.
    ///
    /// The default, 60 seconds, suits a store whose commits end within seconds of their
    /// deadline; a store whose operations may run longer reports its own bound, and a
    /// keystore that wraps another forwards the wrapped one's.
    var uncertainCommitWindow: Duration { get }

    /// Ends every ``changes()`` stream and releases what the keystore holds (connections,
    /// files, background work) once the calls in progress end; later calls fail with
    /// ``KeystoreError/Code/storeUnavailable``. Calling it again does nothing.
    ///
    /// Close a keystore after every client using it has shut down; code that holds an
    /// `any Keystore` closes whichever engine it is the same way.
    func close() async
}

extension Keystore {
    /// 60 seconds: see ``Keystore/uncertainCommitWindow``.
    public var uncertainCommitWindow: Duration { .seconds(60) }
}
