#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Dispatch
import Logging
import PostgresNIO
import SecureStorage

/// Resolves a ``KeySource`` to the 256-bit key of one access group, the same on every
/// instance of a fleet.
///
/// - `raw` and `environment` give their key directly.
/// - `passphrase` derives it with scrypt from a salt stored in `identity_broker_key_salts`,
///   one row per access group in SecureStorage's salt-file format (`0xA7 ‖ version ‖ log2 N ‖
///   r ‖ p ‖ salt`), created by the first instance (`ON CONFLICT DO NOTHING`, then read
///   back), so every instance derives the same key.
/// - `keyFile` reads ``PostgresKeystore/Configuration/keyFilePath``, which must be given:
///   a key created per host would differ between instances.
///
/// The keys of ``KeySource/alsoOpening(_:)`` resolve the same way, except that one that
/// does not exist (no key file path, no such file, no salt for the group yet) is left out
/// rather than created or refused: it cannot have sealed anything.
enum PostgresKeyResolver {
    /// The sealing key of `source` for `group`, and the opening keys that exist.
    static func keys(
        for group: AccessGroup, source: KeySource, configuration: PostgresKeystore.Configuration,
        connection own: OwnConnection, logger: Logger
    ) async throws(KeystoreError) -> KeyRing {
        let sealing = try await sealingKey(for: group, source: source, configuration: configuration, connection: own, logger: logger)
        var opening: [SecretBytes] = []
        for kind in source.alsoOpeningKinds {
            if let key = try await key(for: group, kind: kind, create: false, configuration: configuration, connection: own, logger: logger) {
                opening.append(key)
            }
        }
        return KeyRing(sealing: sealing, opening: opening)
    }

    /// The keys of `source` for `group` that exist, none created: what a rotation proves its
    /// authority with before it makes anything. `sealing` is `nil` when its key file or salt
    /// does not exist yet.
    static func existingKeys(
        for group: AccessGroup, source: KeySource, configuration: PostgresKeystore.Configuration,
        connection own: OwnConnection, logger: Logger
    ) async throws(KeystoreError) -> (sealing: SecretBytes?, opening: [SecretBytes]) {
        let sealing = try await key(for: group, kind: source.kind, create: false, configuration: configuration, connection: own, logger: logger)
        var opening: [SecretBytes] = []
        for kind in source.alsoOpeningKinds {
            if let key = try await key(for: group, kind: kind, create: false, configuration: configuration, connection: own, logger: logger) {
                opening.append(key)
            }
        }
        return (sealing, opening)
    }

    /// The sealing key of `source` for `group`, made when missing (a passphrase's salt).
    static func sealingKey(
        for group: AccessGroup, source: KeySource, configuration: PostgresKeystore.Configuration,
        connection own: OwnConnection, logger: Logger
    ) async throws(KeystoreError) -> SecretBytes {
        guard let key = try await key(for: group, kind: source.kind, create: true, configuration: configuration, connection: own, logger: logger) else {
            throw KeystoreError(.invalidKey, "the sealing key could not be resolved")
        }
        return key
    }

    /// The key of `kind`, or `nil` when `create` is off and it does not exist.
    private static func key(
        for group: AccessGroup, kind: KeySource.Kind, create: Bool, configuration: PostgresKeystore.Configuration,
        connection own: OwnConnection, logger: Logger
    ) async throws(KeystoreError) -> SecretBytes? {
        switch kind {
        case .raw(let bytes):
            guard bytes.count == Sealing.keySize else {
                throw KeystoreError(.invalidKey, "a raw key must be 32 bytes")
            }
            return bytes
        case .environment(let variable):
            return try KeySource.environmentKey(variable: variable)
        case .keyFile:
            guard let path = configuration.keyFilePath else {
                if !create { return nil }
                throw KeystoreError(.invalidKey, "KeySource.keyFile needs PostgresKeystore.Configuration.keyFilePath: every instance of a fleet must read the same key (or use .environment or .passphrase)")
            }
            if !create, access(path, F_OK) != 0, errno == ENOENT { return nil }
            return try KeySource.readKeyFile(at: path)
        case .passphrase(let passphrase):
            let column = PostgresNamespace.column(for: group)
            let fresh = KeyDerivation.SaltFile.encode(
                salt: try KeystoreError.rethrowing { try CryptoRuntime.randomBytes(KeyDerivation.saltSize) })
            let found: [UInt8]?
            do {
                found = try await own.run(logger: logger) { connection in
                    // Capped as item values are: another role may have written the row.
                    func readSalt() async throws -> [PostgresRow] {
                        try await connection.query(
                            "SELECT CASE WHEN pg_catalog.octet_length(salt) <= 64 THEN salt ELSE ''::bytea END FROM identity_broker_key_salts WHERE access_group = \(column)",
                            logger: logger
                        ).collect()
                    }
                    // Read first: an open that finds the salt writes nothing, so it works on a
                    // database that refuses writes (reads keep working there).
                    var rows = try await readSalt()
                    if rows.isEmpty, !create { return nil as [UInt8]? }
                    if rows.isEmpty {
                        try KeyDerivation.requireUsable(passphrase, creatingSalt: true)
                        try await connection.query("""
                            INSERT INTO identity_broker_key_salts (access_group, salt) VALUES (\(column), \(ByteBuffer(bytes: fresh)))
                            ON CONFLICT (access_group) DO NOTHING
                            """, logger: logger)
                        rows = try await readSalt()
                    }
                    guard let buffer = try rows.first?.decode(ByteBuffer.self) else {
                        throw KeystoreError(.corruptFormat, "the passphrase salt of access group '\(group)' vanished after it was stored")
                    }
                    return Array(buffer.readableBytesView)
                }
            } catch {
                throw KeystoreError.postgres(error, operation: "reading the passphrase salt", configuration: configuration)
            }
            guard let stored = found else { return nil }
            // This engine has always stored the header; the bare 16 bytes of the SQLite engine's
            // oldest releases would give a passphrase the legacy, cheaper scrypt cost, and any role
            // that may write the table could plant them before a group's first use.
            guard stored.count != KeyDerivation.saltSize else {
                throw KeystoreError(
                    .corruptFormat,
                    "the passphrase salt of access group '\(group)' has no header (a format this engine never writes): "
                        + "another role may have planted it; delete the row if no item of the group was sealed with it",
                    path: "identity_broker_key_salts[\(group)]")
            }
            let salt = try KeystoreError.rethrowing {
                try KeyDerivation.SaltFile.decode(stored, path: "identity_broker_key_salts[\(group)]")
            }
            // scrypt takes a few hundred milliseconds and 128 MiB: keep it off the cooperative pool.
            let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<SecretBytes, KeystoreError>, Never>) in
                DispatchQueue.global().async {
                    continuation.resume(returning: Result { () throws(KeystoreError) -> SecretBytes in
                        try KeystoreError.rethrowing {
                            try KeyDerivation.scrypt(passphrase: passphrase, salt: salt.salt, parameters: salt.parameters)
                        }
                    })
                }
            }
            return try result.get()
        }
    }
}
