import Logging
import PostgresNIO
import SecureStorage

/// The PostgreSQL engine's `KeyCheck` (SecureStorage): one per access group (the key is the group's,
/// whatever the service), checked by every open and by a migration for both groups.
///
/// The row lives in `identity_broker_items` under the service name `""`, which no keystore
/// has (service names are never empty), so no keystore lists, reads, moves or removes it. The
/// first open in a group stores it; when several instances store one at once, the stored row
/// decides for all.
enum PostgresKeyCheck {
    /// The reserved service name of the check rows.
    static let service = ""
    /// The item key of the check row in each access group.
    static let key = "key-check"

    /// ``verify(group:key:on:logger:)`` on a pooled connection, every failure a
    /// ``KeystoreError``.
    static func verify(
        group: AccessGroup, key secret: SecretBytes, configuration: PostgresKeystore.Configuration,
        client: PostgresClient, logger: Logger
    ) async throws(KeystoreError) {
        do {
            try await client.withConnection { connection in
                try await verify(group: group, key: secret, on: connection, logger: logger)
            }
        } catch {
            throw KeystoreError.postgres(error, operation: "checking the key", configuration: configuration)
        }
    }

    /// Checks `secret` against `group`'s check row, storing one first when there is none.
    static func verify(
        group: AccessGroup, key secret: SecretBytes, on connection: PostgresConnection, logger: Logger
    ) async throws {
        let column = PostgresNamespace.column(for: group)
        let binding = ItemBinding(service: service, group: group)
        let namespace = KeyCheck.describe(service: nil, group: group)
        if let stored = try await read(column, on: connection, logger: logger) {
            try KeyCheck.verify(stored, binding: binding, with: secret, name: key, namespace: namespace)
            return
        }
        let rows = try await connection.query("""
            SELECT service, key, value FROM identity_broker_items
            WHERE access_group = \(column) AND service <> \(service) LIMIT \(KeyCheck.itemsTried)
            """, logger: logger).collect()
        let items = try rows.map { try $0.decode((String, String, ByteBuffer).self) }
        try KeyCheck.requireOneOpens(items, namespace: namespace) { item in
            let opened = try? ItemBinding(service: item.0, group: group).open(Array(item.2.readableBytesView), with: secret, forKey: item.1)
            return opened != nil
        }
        let sealed = try KeyCheck.seal(binding, with: secret, name: key)
        try await connection.query("""
            INSERT INTO identity_broker_items (service, access_group, key, version, value)
            VALUES (\(service), \(column), \(key), NULL, \(ByteBuffer(bytes: sealed)))
            ON CONFLICT (service, access_group, key) DO NOTHING
            """, logger: logger)
        guard let stored = try await read(column, on: connection, logger: logger) else {
            throw KeystoreError(.corruptFormat, "the key check of \(namespace) vanished after it was stored")
        }
        try KeyCheck.verify(stored, binding: binding, with: secret, name: key, namespace: namespace)
    }

    private static func read(_ column: String, on connection: PostgresConnection, logger: Logger) async throws -> [UInt8]? {
        let rows = try await connection.query("""
            SELECT value FROM identity_broker_items WHERE service = \(service) AND access_group = \(column) AND key = \(key)
            """, logger: logger).collect()
        return try rows.first.map { Array(try $0.decode(ByteBuffer.self).readableBytesView) }
    }
}
