import Logging
import PostgresNIO
import SecureStorage

/// The PostgreSQL engine's `KeyCheck` (SecureStorage): one per service and access group, as
/// items are sealed per service and group (tools sharing a database may use different keys),
/// checked by every open and by a migration for both of its groups.
///
/// The rows live in `identity_broker_items` under the service name `""`, which no keystore
/// has (service names are never empty), with the checked service's name as their key, so no
/// keystore lists, reads, moves or removes them. The first open of a service in a group
/// stores its row; when several instances store one at once, the stored row decides for all.
enum PostgresKeyCheck {
    /// The reserved service name of the check rows.
    static let service = ""

    /// ``verify(service:group:keys:on:logger:)`` on the keystore's own connection, every failure a
    /// ``KeystoreError``.
    static func verify(
        service checked: String, group: AccessGroup, keys: KeyRing, configuration: PostgresKeystore.Configuration,
        connection own: OwnConnection, logger: Logger
    ) async throws(KeystoreError) {
        do {
            try await own.run(logger: logger) { connection in
                try await verify(service: checked, group: group, keys: keys, on: connection, logger: logger)
            }
        } catch {
            throw KeystoreError.postgres(error, operation: "checking the key", configuration: configuration)
        }
    }

    /// Checks the sealing key of `keys` against the check row of `checked` in `group`,
    /// storing one first when there is none.
    static func verify(
        service checked: String, group: AccessGroup, keys: KeyRing, on connection: PostgresConnection, logger: Logger
    ) async throws {
        let secret = keys.sealing
        let column = PostgresNamespace.column(for: group)
        let binding = ItemBinding(service: service, group: group)
        let namespace = KeyCheck.describe(service: checked, group: group)
        if let stored = try await read(checked, column, on: connection, logger: logger) {
            try KeyCheck.verify(stored, binding: binding, keys: keys, name: checked, namespace: namespace)
            return
        }
        let items = try await firstItems(checked, column, on: connection, logger: logger)
        let itemBinding = ItemBinding(service: checked, group: group)
        try KeyCheck.requireOneOpens(items, namespace: namespace) { item in
            KeyRing(sealing: secret).opens(Array(item.1.readableBytesView), binding: itemBinding, forKey: item.0)
        }
        let sealed = try KeyCheck.seal(binding, with: secret, name: checked)
        try await connection.query("""
            INSERT INTO identity_broker_items (service, access_group, key, version, value)
            VALUES (\(service), \(column), \(checked), NULL, \(ByteBuffer(bytes: sealed)))
            ON CONFLICT (service, access_group, key) DO NOTHING
            """, logger: logger)
        guard let stored = try await read(checked, column, on: connection, logger: logger) else {
            throw KeystoreError(.corruptFormat, "the key check of \(namespace) vanished after it was stored")
        }
        try KeyCheck.verify(stored, binding: binding, keys: keys, name: checked, namespace: namespace)
    }

    /// Whether a rotation of `checked` in `group` may start: throws
    /// ``KeystoreError/Code/invalidKey`` unless one of `keys` opens its check row (the sealing
    /// key, once rotated; an opening key, before) or, with no row stored yet, one of its first
    /// items. `false` when there is neither: nothing is sealed, so there is nothing to rotate.
    static func mayStartRotation(
        service checked: String, group: AccessGroup, keys: KeyRing, on connection: PostgresConnection, logger: Logger
    ) async throws -> Bool {
        let column = PostgresNamespace.column(for: group)
        let namespace = KeyCheck.describe(service: checked, group: group)
        if let stored = try await read(checked, column, on: connection, logger: logger) {
            guard KeyCheck.opener(of: stored, binding: ItemBinding(service: service, group: group), keys: keys, name: checked) != nil else {
                throw KeystoreError(
                    .invalidKey,
                    "none of the keys given opens the key check of \(namespace): the old key must be among the keys that only open")
            }
            return true
        }
        let items = try await firstItems(checked, column, on: connection, logger: logger)
        guard !items.isEmpty else { return false }
        let itemBinding = ItemBinding(service: checked, group: group)
        try KeyCheck.requireOneOpens(items, namespace: namespace) { item in
            keys.opens(Array(item.1.readableBytesView), binding: itemBinding, forKey: item.0)
        }
        return true
    }

    /// Moves the check row of `checked` in `group` to the sealing key of `keys`, inside the
    /// caller's transaction, the row locked (`FOR UPDATE`) and ``mayStartRotation`` checked
    /// again under that lock: another rotation may have moved it since. Where there is no row
    /// yet (items older than the check), there is nothing to lock: the row is inserted only if
    /// still absent, and read back, so of two rotations storing one at once the second finds
    /// the first's and stops. `false` when the namespace holds nothing sealed by now.
    static func moveForRotation(
        service checked: String, group: AccessGroup, keys: KeyRing, on connection: PostgresConnection, logger: Logger
    ) async throws -> Bool {
        let column = PostgresNamespace.column(for: group)
        let existed = try await read(checked, column, lock: "FOR UPDATE", on: connection, logger: logger) != nil
        guard try await mayStartRotation(service: checked, group: group, keys: keys, on: connection, logger: logger) else { return false }
        let sealed = ByteBuffer(bytes: try KeyCheck.seal(ItemBinding(service: service, group: group), with: keys.sealing, name: checked))
        if existed {
            try await connection.query("""
                UPDATE identity_broker_items SET value = \(sealed) WHERE service = \(service) AND access_group = \(column) AND key = \(checked)
                """, logger: logger)
        } else {
            try await connection.query("""
                INSERT INTO identity_broker_items (service, access_group, key, version, value)
                VALUES (\(service), \(column), \(checked), NULL, \(sealed))
                ON CONFLICT (service, access_group, key) DO NOTHING
                """, logger: logger)
        }
        try await requireStillSealing(service: checked, group: group, keys: keys, on: connection, logger: logger)
        return true
    }

    /// Throws ``KeystoreError/Code/invalidKey`` unless the sealing key of `keys` still opens
    /// the check row, read `FOR SHARE` inside the caller's transaction (a rotation's batch):
    /// two rotations to different keys at once stop rather than leave items split between them.
    static func requireStillSealing(
        service checked: String, group: AccessGroup, keys: KeyRing, on connection: PostgresConnection, logger: Logger
    ) async throws {
        let stored = try await read(checked, PostgresNamespace.column(for: group), lock: "FOR SHARE", on: connection, logger: logger)
        guard let stored, KeyCheck.opener(of: stored, binding: ItemBinding(service: service, group: group), keys: keys, name: checked) == .sealing else {
            throw KeystoreError(
                .invalidKey,
                "the key check of \(KeyCheck.describe(service: checked, group: group)) no longer opens with the sealing key: another "
                    + "rotation moved it to another key meanwhile; the items re-sealed so far open with this key: give it as another key "
                    + "to that rotation and run it again")
        }
    }

    /// The first ``KeyCheck/itemsTried`` items of `checked` in the group `column`, sealed:
    /// what a group without a check row proves a key with.
    private static func firstItems(
        _ checked: String, _ column: String, on connection: PostgresConnection, logger: Logger
    ) async throws -> [(String, ByteBuffer)] {
        let rows = try await connection.query("""
            SELECT key, \(unescaped: PostgresSchema.cappedValue) FROM identity_broker_items
            WHERE service = \(checked) AND access_group = \(column) ORDER BY key LIMIT \(KeyCheck.itemsTried)
            """, logger: logger).collect()
        return try rows.map { try $0.decode((String, ByteBuffer).self) }
    }

    private static func read(
        _ checked: String, _ column: String, lock: String = "", on connection: PostgresConnection, logger: Logger
    ) async throws -> [UInt8]? {
        let rows = try await connection.query("""
            SELECT \(unescaped: PostgresSchema.cappedValue) FROM identity_broker_items
            WHERE service = \(service) AND access_group = \(column) AND key = \(checked) \(unescaped: lock)
            """, logger: logger).collect()
        return try rows.first.map { Array(try $0.decode(ByteBuffer.self).readableBytesView) }
    }
}
