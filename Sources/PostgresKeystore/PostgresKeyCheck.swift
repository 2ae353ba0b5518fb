import Logging
import PostgresNIO
import SecureStorage

/// A known value sealed with each access group's key, which an instance opens before it
/// writes anything: a wrong key fails the open instead of the fleet's sessions.
///
/// Items sealed with one key do not open with another, so a wrong key shows as soon as an
/// item is read. But a federation replaces a saved session it cannot open, so an instance
/// configured with another key (a typo in one host's environment, another passphrase) would
/// overwrite its fleet's sessions with items no other instance can open. So every open checks
/// its key against the group's check row, and fails with ``KeystoreError/Code/invalidKey``
/// when the key does not open it.
///
/// The row lives in `identity_broker_items` under the service name `""`, which no keystore
/// has (service names are never empty), so no keystore lists, reads, moves or removes it. The
/// first open in a group stores it. A group that already holds items (made before this check
/// existed) gets it only from a key that opens one of them, so a wrong key cannot claim such
/// a group first; when several instances store one at once, the stored row decides for all.
enum PostgresKeyCheck {
    /// The reserved service name of the check rows.
    static let service = ""
    /// The item key of the check row in each access group.
    static let key = "key-check"
    /// The sealed value: fixed, since only whether it opens matters.
    static let value = Array("identity-broker key check, version 1".utf8)
    /// How many of a group's items an unchecked group's key may try before it is refused:
    /// one damaged item must not lock out the right key.
    static let itemsTried = 8

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
        if let stored = try await read(column, on: connection, logger: logger) {
            try check(stored, binding: binding, secret: secret, group: group)
            return
        }
        let items = try await connection.query("""
            SELECT service, key, value FROM identity_broker_items
            WHERE access_group = \(column) AND service <> \(service) LIMIT \(itemsTried)
            """, logger: logger).collect()
        if !items.isEmpty {
            var opened = false
            for row in items {
                let (itemService, itemKey, sealed) = try row.decode((String, String, ByteBuffer).self)
                let itemBinding = ItemBinding(service: itemService, group: group)
                if (try? itemBinding.open(Array(sealed.readableBytesView), with: secret, forKey: itemKey)) != nil {
                    opened = true
                    break
                }
            }
            guard opened else {
                throw KeystoreError(
                    .invalidKey,
                    "the key opens none of the first \(items.count) items of \(describe(group)): every instance must use the key its items were sealed with")
            }
        }
        let sealed = try binding.seal(value, with: secret, forKey: key)
        try await connection.query("""
            INSERT INTO identity_broker_items (service, access_group, key, version, value)
            VALUES (\(service), \(column), \(key), NULL, \(ByteBuffer(bytes: sealed)))
            ON CONFLICT (service, access_group, key) DO NOTHING
            """, logger: logger)
        guard let stored = try await read(column, on: connection, logger: logger) else {
            throw KeystoreError(.corruptFormat, "the key check of \(describe(group)) vanished after it was stored")
        }
        try check(stored, binding: binding, secret: secret, group: group)
    }

    private static func read(_ column: String, on connection: PostgresConnection, logger: Logger) async throws -> [UInt8]? {
        let rows = try await connection.query("""
            SELECT value FROM identity_broker_items WHERE service = \(service) AND access_group = \(column) AND key = \(key)
            """, logger: logger).collect()
        return try rows.first.map { Array(try $0.decode(ByteBuffer.self).readableBytesView) }
    }

    private static func check(_ stored: [UInt8], binding: ItemBinding, secret: SecretBytes, group: AccessGroup) throws {
        guard (try? binding.open(stored, with: secret, forKey: key)) == value else {
            throw KeystoreError(
                .invalidKey,
                "the key does not open the key check of \(describe(group)): every instance must use the key its items are sealed with")
        }
    }

    private static func describe(_ group: AccessGroup) -> String {
        group.name.map { "access group '\($0)'" } ?? "the private namespace (no access group)"
    }
}
