import SecureStorage

/// Sessions in a ``Keystore``: one sealed item per session under `session.NAME`, written
/// with a version so that clients racing on one session converge (see
/// ``SessionRecord/storeVersion``). The provider token is never part of what is stored.
///
/// Every keystore failure becomes ``FederationError/Code/storage`` with the
/// `KeystoreError` attached and the session named.
package struct SessionStore: Sendable {
    static let keyPrefix = "session."

    let keystore: any Keystore
    /// Tags this store's batches, so its client's change feed can leave out the commits it
    /// made itself (it already holds what it stored) instead of reading each one back.
    let writer = KeystoreBatch.makeWriterTag()

    /// The keystore's change feed without this store's own commits, where the keystore can
    /// tell them apart; else every change (re-reading our own is redundant, not wrong).
    func changesByOthers() -> AsyncStream<KeystoreChange> {
        if let filtering = keystore as? any WriterFilteringKeystore {
            return filtering.changes(excludingWriter: writer)
        }
        return keystore.changes()
    }

    /// The session named by a keystore key, or `nil` for keys that are not sessions: other
    /// items, and names no session can have (``SessionName``). Those come from whoever can
    /// write the store or signal its change feed (any role that can connect to a PostgreSQL
    /// database may `NOTIFY`; any member of a shared group may write): read back, they would
    /// reach the cache, every observer of all sessions and the logs.
    package static func session(forKey key: String) -> String? {
        guard key.hasPrefix(keyPrefix) else { return nil }
        let name = String(key.dropFirst(keyPrefix.count))
        return SessionName.isValid(name) ? name : nil
    }

    /// The stored record of `session`, or `nil` when none is stored.
    func load(_ session: String) async throws(FederationError) -> SessionRecord? {
        let bytes: [UInt8]?
        do {
            bytes = try await keystore.value(forKey: Self.keyPrefix + session)
        } catch {
            throw Self.readFailure(session, error)
        }
        return try Self.record(bytes, session: session)
    }

    /// ``load(_:)`` through a synchronous read of the keystore key: the same errors, the
    /// same decoding.
    static func load(_ session: String, reading read: (String) throws(KeystoreError) -> [UInt8]?) throws(FederationError) -> SessionRecord? {
        let bytes: [UInt8]?
        do {
            bytes = try read(keyPrefix + session)
        } catch {
            throw readFailure(session, error)
        }
        return try record(bytes, session: session)
    }

    /// The record in the stored `bytes`, which are wiped.
    private static func record(_ bytes: [UInt8]?, session: String) throws(FederationError) -> SessionRecord? {
        guard var bytes else { return nil }
        defer { CryptoRuntime.cleanse(&bytes) }
        return try SessionRecord(stored: bytes, session: session)
    }

    private static func readFailure(_ session: String, _ error: KeystoreError) -> FederationError {
        failure("read saved session '\(session)'", error)
    }

    /// Stores `record` as `session` unless the store holds a newer version; returns
    /// whether it was stored.
    func save(_ record: SessionRecord, session: String) async throws(FederationError) -> Bool {
        var bytes = try record.storedBytes(session: session)
        defer { CryptoRuntime.cleanse(&bytes) }
        do {
            return try await commitTagged { $0.set(bytes, forKey: Self.keyPrefix + session, version: record.storeVersion) }.first ?? false
        } catch {
            throw Self.failure("save session '\(session)'", error)
        }
    }

    /// Removes `session`, opened or not (a damaged item goes too); missing is fine. Returns
    /// whether there was one.
    @discardableResult
    func remove(_ session: String) async throws(FederationError) -> Bool {
        do {
            return try await commitTagged { $0.remove(forKey: Self.keyPrefix + session) }.first ?? false
        } catch {
            throw Self.failure("remove saved session '\(session)'", error)
        }
    }

    /// Commits one batch tagged with ``writer``. The batch (and its copy of a stored value)
    /// is gone when this returns, so the caller's wipe of its bytes is the last copy's.
    @discardableResult
    private func commitTagged(_ build: (inout KeystoreBatch) -> Void) async throws(KeystoreError) -> [Bool] {
        var batch = KeystoreBatch()
        build(&batch)
        batch.writer = writer
        return try await keystore.commit(batch)
    }

    /// The names of every stored session, sorted.
    func names() async throws(FederationError) -> [String] {
        do {
            return try await keystore.keys().compactMap(Self.session(forKey:))
        } catch {
            throw Self.failure("list the saved sessions", error)
        }
    }

    private static func failure(_ what: String, _ error: KeystoreError) -> FederationError {
        FederationError(code: .storage, message: "could not \(what): \(error.code)", keystoreError: error)
    }
}
