import Logging

extension SQLiteKeystore {
    static let lastGroupName = "last_group"

    /// Records `group` as the service's last access group in the user's private database,
    /// first moving the items from the previous group when the policy asks for it.
    ///
    /// The record lives where only the user can write, so no member of a shared group can
    /// steer another user's migration. Returns the open connection to the private database
    /// (the caller closes it, or keeps it as the writer's when `group` is the private one)
    /// and, for the private group only, its namespace with its key resolved (not again: with a
    /// passphrase, each resolution is a scrypt derivation). A named group's open needs the
    /// private database but not its key, which is neither resolved nor made: the record is
    /// plain text, and the private namespace may be sealed with another kind of key than the
    /// group (a group rotated away from an environment key), or hold nothing.
    static func recordGroup(
        _ group: AccessGroup,
        layout: StoreLayout,
        keySource: KeySource,
        configuration: Configuration,
        logger: Logger?
    ) throws(KeystoreError) -> (namespace: StoreNamespace?, connection: SQLiteConnection) {
        // Before anything is recorded: a name no namespace can have must not become the last group.
        try NameRules.validate(group: group)
        let privateStore: StoreNamespace?
        let privatePath: String
        if group == .none {
            guard let opened = try StoreNamespace.open(
                layout: layout, group: .none, keySource: keySource, create: .whatIsMissing(busyTimeout: configuration.busyTimeout))
            else {
                throw KeystoreError(.invalidKey, "no key available for the private namespace")
            }
            (privateStore, privatePath) = (opened, opened.databasePath)
        } else {
            guard let path = try layout.prepareNamespaceFiles(.none, create: true) else {
                throw KeystoreError(.io, "the private database could not be made", path: layout.databasePath(.none))
            }
            (privateStore, privatePath) = (nil, path)
        }
        let connection = try StoreNamespace.connect(
            databasePath: privatePath, group: .none, service: layout.service, busyTimeout: configuration.busyTimeout)
        do throws(KeystoreError) {
            try record(group, on: connection, layout: layout, privatePath: privatePath, keySource: keySource, configuration: configuration, logger: logger)
        } catch {
            connection.close()
            throw error
        }
        return (privateStore, connection)
    }

    private static func record(
        _ group: AccessGroup,
        on connection: SQLiteConnection,
        layout: StoreLayout,
        privatePath: String,
        keySource: KeySource,
        configuration: Configuration,
        logger: Logger?
    ) throws(KeystoreError) {
        let recorded = try StoreSchema.meta(lastGroupName, on: connection)
        let last = recorded.flatMap(StoreSchema.decodeGroup)
        if recorded != nil && last == nil {
            throw KeystoreError(.corruptFormat, "unreadable last access group record", path: privatePath)
        }
        if let last, last == group { return }
        if let last {
            if configuration.moveItemsFromPreviousGroup {
                let metadata: Logger.Metadata = [
                    "broker.service": "\(layout.service)",
                    "broker.fromGroup": "\(last)",
                    "broker.accessGroup": "\(group)",
                ]
                // Never twice: the new group is recorded after the move, so no member of a shared
                // old group can feed items into this one at later opens. A damaged item stays
                // behind rather than failing the open. When the old group is shared, no failure
                // on its side fails the open (its other members could otherwise hold its lock or
                // spoil its key check and block every open, or plant more than a move on open
                // copies, ``StoreMigration/moveOnOpenByteLimit``). A failure on the user's own side
                // (the new group's key, checked first when the group exists; its database busy
                // or full; or anything when moving out of the private group, where only the user
                // writes) fails the open and records nothing, so the next open tries again:
                // recording it would leave the items behind for good. What stays behind is logged and can be moved with `migrate`.
                var migration = StoreMigration(layout: layout, from: last, to: group, keySource: keySource, busyTimeout: configuration.busyTimeout)
                migration.leavingUnreadable = true
                do throws(StoreMigration.Failure) {
                    let outcome = try migration.runNotingSide()
                    logger?.notice("keystore items moved from the previous access group", metadata: metadata.merging(["broker.itemCount": "\(outcome.moved)"]) { $1 })
                    if outcome.unreadableLeft > 0 {
                        logger?.warning(
                            "keystore items stay in the previous access group (they, or newer items of the same name in the new group, do not open); move them with migrate once fixed",
                            metadata: metadata.merging(["broker.itemCount": "\(outcome.unreadableLeft)"]) { $1 })
                    }
                } catch where last.isShared && !error.onTarget {
                    logger?.warning(
                        error.copied
                            ? "keystore items copied from the previous access group, but not removed there; they stay there too: run migrate to remove them"
                            : "keystore items not moved from the previous access group; they stay there: move them with migrate",
                        metadata: metadata.merging(["broker.error": "\(error.error.code)", "broker.errorDescription": "\(error.error)"]) { $1 })
                } catch {
                    throw error.error
                }
            } else {
                logger?.notice("access group changed without migration; previous items left in place", metadata: [
                    "broker.service": "\(layout.service)",
                    "broker.fromGroup": "\(last)",
                    "broker.accessGroup": "\(group)",
                ])
            }
        }
        try connection.immediateTransaction { () throws(KeystoreError) in
            try StoreSchema.setMeta(lastGroupName, StoreSchema.encode(group), on: connection)
        }
    }
}
