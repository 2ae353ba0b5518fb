extension StoreNamespace {
    /// The meta row holding the namespace's ``KeyCheck``, sealed and in base64url.
    static let keyCheckName = "key_check"
    /// The name the check is sealed under: empty, which no item key can be.
    static let keyCheckItemName = ""

    /// Refuses this namespace's key, with ``KeystoreError/Code/invalidKey``, when it does not
    /// open the namespace's ``KeyCheck``; stores the check first when there is none (only if
    /// the key opens one of the items already there, and, for a key from a headerless salt in
    /// a shared group, only if there are items or another service's database in the group
    /// holds a key check the key opens: ``KeystoreError/Code/corruptFormat`` else).
    func verifyKey(on connection: SQLiteConnection, service: String) throws(KeystoreError) {
        let label = KeyCheck.describe(service: service, group: group)
        if let stored = try storedKeyCheck(on: connection) {
            try KeyCheck.verify(stored, binding: binding, keys: keys, name: Self.keyCheckItemName, namespace: label)
            return
        }
        try connection.immediateTransaction { () throws(KeystoreError) in
            // Another process may have stored one since the read above.
            guard try storedKeyCheck(on: connection) == nil else { return }
            let items = try firstItems(on: connection)
            if let salt = headerlessSharedSalt, items.isEmpty, !anotherServiceOfTheGroupOpens() {
                throw KeystoreError(
                    .corruptFormat,
                    "the salt file of access group '\(group.name ?? "")' has no header (a format only early releases wrote) and no "
                        + "service's database in the group holds a key check this key opens: another member of the group may have "
                        + "planted it; delete it only if no database in the group's directory holds items",
                    path: salt)
            }
            try KeyCheck.requireOneOpens(items, namespace: label) { item in
                KeyRing(sealing: keys.sealing).opens(item.1, binding: binding, forKey: item.0)
            }
            try storeKeyCheck(on: connection)
        }
        guard let stored = try storedKeyCheck(on: connection) else {
            throw KeystoreError(.corruptFormat, "the key check of \(label) vanished after it was stored", path: databasePath)
        }
        try KeyCheck.verify(stored, binding: binding, keys: keys, name: Self.keyCheckItemName, namespace: label)
    }

    /// For a reader: throws ``KeystoreError/Code/invalidKey`` unless one of the keys, the
    /// sealing key or one that only opens, opens the stored check (a reader never seals, so
    /// during a rotation it may read with the new key sealing and the old one opening);
    /// `false`, with nothing stored, when there is no check yet (a full open stores it).
    func verifyStoredKeyForReading(on connection: SQLiteConnection, service: String) throws(KeystoreError) -> Bool {
        guard let stored = try storedKeyCheck(on: connection) else { return false }
        guard KeyCheck.opener(of: stored, binding: binding, keys: keys, name: Self.keyCheckItemName) == nil else { return true }
        let label = KeyCheck.describe(service: service, group: group)
        try KeyCheck.verify(stored, binding: binding, keys: keys, name: Self.keyCheckItemName, namespace: label)
        return true
    }

    /// Whether a rotation may start: throws ``KeystoreError/Code/invalidKey`` unless one of
    /// the keys opens the namespace's ``KeyCheck`` (the sealing key, once rotated; an opening
    /// key, before) or, with no check stored yet, one of its first items. `false` when there
    /// is neither a check nor an item: nothing is sealed, so there is nothing to rotate.
    func mayStartRotation(on connection: SQLiteConnection, service: String) throws(KeystoreError) -> Bool {
        let label = KeyCheck.describe(service: service, group: group)
        if let stored = try storedKeyCheck(on: connection) {
            guard KeyCheck.opener(of: stored, binding: binding, keys: keys, name: Self.keyCheckItemName) != nil else {
                throw KeystoreError(
                    .invalidKey,
                    "none of the keys given opens the key check of \(label): the old key must be among the keys that only open")
            }
            return true
        }
        let items = try firstItems(on: connection)
        guard !items.isEmpty else { return false }
        try KeyCheck.requireOneOpens(items, namespace: label) { item in
            keys.opens(item.1, binding: binding, forKey: item.0)
        }
        return true
    }

    /// Moves the key check to the sealing key, under the write lock, once a rotation may
    /// start (checked again there: another rotation may have moved it since). A sealing key
    /// derived from a headerless salt in a shared group is refused unless it already opens
    /// the check (``ResolvedKey/headerlessSharedSalt``: a member may have planted the salt,
    /// choosing it and a cheaper cost for everything the rotation would seal). `false` when
    /// the namespace holds nothing sealed by now.
    func moveKeyCheckForRotation(on connection: SQLiteConnection, service: String) throws(KeystoreError) -> Bool {
        try connection.immediateTransaction { () throws(KeystoreError) -> Bool in
            guard try mayStartRotation(on: connection, service: service) else { return false }
            if let salt = headerlessSharedSalt {
                let stored = try storedKeyCheck(on: connection)
                guard let stored, KeyCheck.opener(of: stored, binding: binding, keys: keys, name: Self.keyCheckItemName) == .sealing else {
                    throw KeystoreError(
                        .corruptFormat,
                        "the salt file of access group '\(group.name ?? "")' has no header (a format only early releases wrote): another member "
                            + "of the group may have planted it, so a rotation does not seal with a key derived from it; rotate to an "
                            + "environment key, or remove the salt file if no item of the group was sealed with it",
                        path: salt)
                }
            }
            try storeKeyCheck(on: connection)
            return true
        }
    }

    /// Throws ``KeystoreError/Code/invalidKey`` unless the sealing key still opens the key
    /// check: checked by each batch of a rotation, under the write lock, so that two
    /// rotations to different keys at once stop rather than leave items split between them.
    func requireKeyCheckStillSealing(on connection: SQLiteConnection, service: String) throws(KeystoreError) {
        guard let stored = try storedKeyCheck(on: connection),
              KeyCheck.opener(of: stored, binding: binding, keys: keys, name: Self.keyCheckItemName) == .sealing
        else {
            throw KeystoreError(
                .invalidKey,
                "the key check of \(KeyCheck.describe(service: service, group: group)) no longer opens with the sealing key: another "
                    + "rotation moved it to another key meanwhile; the items re-sealed so far open with this key: give it as another key "
                    + "to that rotation and run it again")
        }
    }

    /// Stores the key check sealed with the sealing key, replacing any other.
    func storeKeyCheck(on connection: SQLiteConnection) throws(KeystoreError) {
        let sealed = try KeyCheck.seal(binding, with: keys.sealing, name: Self.keyCheckItemName)
        try StoreSchema.setMeta(Self.keyCheckName, Base64.urlEncode(sealed), on: connection)
    }

    private static let firstItems = "SELECT key, value FROM items ORDER BY id LIMIT ?1"

    /// The first ``KeyCheck/itemsTried`` items, sealed: what a namespace without a check
    /// proves a key with.
    private func firstItems(on connection: SQLiteConnection) throws(KeystoreError) -> [(String, [UInt8])] {
        try connection.withStatement(Self.firstItems) { statement throws(KeystoreError) -> [(String, [UInt8])] in
            try statement.bind(1, int64: Int64(KeyCheck.itemsTried))
            var items: [(String, [UInt8])] = []
            while try statement.step() { items.append((statement.text(0), statement.blob(1))) }
            return items
        }
    }

    /// Whether another service's database beside this one holds a key check this key opens:
    /// the salt file is the group's, shared by every service that uses the group, so a
    /// headerless one some service's items were sealed under serves a new service too. A
    /// member who planted the salt cannot have made such a check without the passphrase.
    /// Databases that cannot be read count as not opening.
    private func anotherServiceOfTheGroupOpens() -> Bool {
        let directory = String(databasePath[..<(databasePath.lastIndex(of: "/") ?? databasePath.startIndex)])
        let suffix = ".sqlite"
        guard let names = try? POSIX.directoryEntries(directory, prefix: "") else { return false }
        for name in names where name.hasSuffix(suffix) && directory + "/" + name != databasePath {
            guard let bytes = Base64.urlDecode(String(name.dropLast(suffix.count))),
                  let service = String(validating: bytes, as: UTF8.self),
                  let connection = try? SQLiteConnection(path: directory + "/" + name, busyTimeout: .seconds(1))
            else { continue }
            defer { connection.close() }
            guard let text = try? StoreSchema.meta(Self.keyCheckName, on: connection), let stored = Base64.urlDecode(text) else { continue }
            let sibling = ItemBinding(service: service, group: group)
            if (try? KeyCheck.verify(stored, binding: sibling, with: keys.sealing, name: Self.keyCheckItemName, namespace: "")) != nil { return true }
        }
        return false
    }

    /// The stored check; a row that is not base64url reads as a check no key opens.
    private func storedKeyCheck(on connection: SQLiteConnection) throws(KeystoreError) -> [UInt8]? {
        try StoreSchema.meta(Self.keyCheckName, on: connection).map { Base64.urlDecode($0) ?? [] }
    }
}
