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
enum PostgresKeyResolver {
    static func key(
        for group: AccessGroup, source: KeySource, configuration: PostgresKeystore.Configuration,
        connection own: OwnConnection, logger: Logger
    ) async throws(KeystoreError) -> SecretBytes {
        switch source.kind {
        case .raw(let bytes):
            guard bytes.count == Sealing.keySize else {
                throw KeystoreError(.invalidKey, "a raw key must be 32 bytes")
            }
            return bytes
        case .environment(let variable):
            return try KeySource.environmentKey(variable: variable)
        case .keyFile:
            guard let path = configuration.keyFilePath else {
                throw KeystoreError(.invalidKey, "KeySource.keyFile needs PostgresKeystore.Configuration.keyFilePath: every instance of a fleet must read the same key (or use .environment or .passphrase)")
            }
            return try readKeyFile(path)
        case .passphrase(let passphrase):
            let column = PostgresNamespace.column(for: group)
            let fresh = KeyDerivation.SaltFile.encode(
                salt: try KeystoreError.rethrowing { try CryptoRuntime.randomBytes(KeyDerivation.saltSize) })
            let stored: [UInt8]
            do {
                stored = try await own.run(logger: logger) { connection in
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

    /// Reads an existing 32-byte key file that is a regular file (not a link), owned by this
    /// user or root, neither group- or world-writable nor world-readable.
    static func readKeyFile(_ path: String) throws(KeystoreError) -> SecretBytes {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else {
            let code = errno
            if code == ENOENT {
                throw KeystoreError(.invalidKey, "the key file does not exist; create it once (32 random bytes, for example `openssl rand 32`) and give every instance the same file", path: path, errno: code)
            }
            throw KeystoreError(.io, "opening the key file failed", path: path, errno: code)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw KeystoreError(.io, "fstat failed", path: path, errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw KeystoreError(.insecurePermissions, "the key file is not a regular file", path: path, mode: UInt32(info.st_mode))
        }
        guard info.st_mode & 0o022 == 0, info.st_mode & 0o004 == 0 else {
            throw KeystoreError(.insecurePermissions, "the key file is group- or world-writable or world-readable", path: path, mode: UInt32(info.st_mode))
        }
        guard info.st_uid == geteuid() || info.st_uid == 0 else {
            throw KeystoreError(.insecurePermissions, "the key file belongs to another user", path: path, mode: UInt32(info.st_mode))
        }
        guard info.st_size == off_t(Sealing.keySize) else {
            throw KeystoreError(.invalidKey, "the key file must hold exactly 32 bytes", path: path)
        }
        var bytes = [UInt8](repeating: 0, count: Sealing.keySize)
        let count = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count == Sealing.keySize else {
            CryptoRuntime.cleanse(&bytes)
            throw KeystoreError(.io, "reading the key file failed", path: path, errno: count < 0 ? errno : EIO)
        }
        return SecretBytes(consuming: &bytes)
    }
}
