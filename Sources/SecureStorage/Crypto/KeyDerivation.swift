import Synchronization
import CLibCrypto

/// Passphrase-based keys through scrypt (`EVP_PBE_scrypt`).
package enum KeyDerivation {
    /// scrypt's cost parameters, stored with the salt so that a later release can raise them
    /// and still open what earlier ones sealed.
    package struct Parameters: Equatable, Sendable {
        /// log2 of the CPU/memory cost N.
        var log2N: UInt8
        /// The block size r.
        var r: UInt8
        /// The parallelisation p.
        var p: UInt8

        var n: UInt64 { 1 << UInt64(log2N) }

        /// The memory `EVP_PBE_scrypt` needs: 128·r·(N + 2) for V plus 128·r·p for B.
        var memory: UInt64 { 128 * UInt64(r) * (n + 2) + 128 * UInt64(r) * UInt64(p) }

        /// What a new salt file gets: N = 2^17, r = 8, p = 1 (128 MiB, a few hundred
        /// milliseconds).
        package static let current = Parameters(log2N: 17, r: 8, p: 1)
        /// What a legacy salt file (16 bytes, no header) was derived with: N = 2^15, r = 8, p = 1.
        static let legacy = Parameters(log2N: 15, r: 8, p: 1)

        /// Whether a salt file may ask for these: at least the current cost (a file cannot
        /// downgrade it) and at most 1 GiB of memory (a file cannot exhaust it).
        var isAcceptable: Bool {
            log2N >= Self.current.log2N && log2N <= 20 && r >= Self.current.r && p >= 1 && p <= 16
                && memory <= KeyDerivation.maximumMemory
        }
    }

    /// The most memory a salt file's parameters may ask scrypt for: 1 GiB (plus B).
    static let maximumMemory: UInt64 = (1 << 30) + (1 << 20)
    package static let saltSize = 16

    /// The salt file: `magic ‖ version ‖ log2 N ‖ r ‖ p ‖ salt(16)`, or, from releases before
    /// the header existed, exactly the 16 salt bytes (read with ``Parameters/legacy``).
    package enum SaltFile {
        static let magic: UInt8 = 0xA7
        static let version: UInt8 = 1
        static let headerSize = 5
        static let size = headerSize + saltSize

        /// A new salt file's bytes for `salt`, with `parameters`.
        package static func encode(salt: [UInt8], parameters: Parameters = .current) -> [UInt8] {
            [magic, version, parameters.log2N, parameters.r, parameters.p] + salt
        }

        /// The parameters and salt stored in a salt file.
        ///
        /// - Throws: ``KeystoreError/Code/corruptFormat`` for a truncated file, an unknown
        ///   version, or parameters outside what this release accepts.
        package static func decode(_ bytes: [UInt8], path: String) throws -> (parameters: Parameters, salt: [UInt8]) {
            if bytes.count == saltSize {
                return (.legacy, bytes)
            }
            guard bytes.count >= 2, bytes[0] == magic else {
                throw KeystoreError(.corruptFormat, "salt file is truncated or not a salt file (\(bytes.count) bytes)", path: path)
            }
            guard bytes[1] == version else {
                throw KeystoreError(.corruptFormat, "salt file has unknown format version \(bytes[1]); a newer release may have written it", path: path)
            }
            guard bytes.count == size else {
                throw KeystoreError(.corruptFormat, "salt file is truncated or too long (\(bytes.count) bytes, expected \(size))", path: path)
            }
            let parameters = Parameters(log2N: bytes[2], r: bytes[3], p: bytes[4])
            guard parameters.isAcceptable else {
                throw KeystoreError(
                    .corruptFormat,
                    "salt file asks for unsupported scrypt parameters (N = 2^\(parameters.log2N), r = \(parameters.r), p = \(parameters.p))",
                    path: path)
            }
            return (parameters, Array(bytes[headerSize...]))
        }
    }

    /// Passphrase derivations run so far in this process (for tests: each costs ~0.3 s and
    /// 128 MiB, so an open must not run one twice).
    static let passphraseDerivations = Atomic<Int>(0)

    /// Refuses an empty passphrase (`.passphrase(environment["P"] ?? "")`) for a namespace
    /// that has no salt yet: its key would be what anyone holding the salt derives. Where a
    /// salt exists (a store an earlier release sealed under an empty passphrase), it is taken,
    /// so that the store can still be read and migrated to another key.
    package static func requireUsable(_ passphrase: SecretBytes, creatingSalt: Bool) throws(KeystoreError) {
        guard passphrase.count > 0 || !creatingSalt else {
            throw KeystoreError(.invalidKey, "the passphrase is empty")
        }
    }

    package static func scrypt(passphrase: SecretBytes, salt: [UInt8], parameters: Parameters) throws -> SecretBytes {
        passphraseDerivations.add(1, ordering: .relaxed)
        var output = try passphrase.withUnsafeBytes { pass in
            try scrypt(password: pass, salt: salt, n: parameters.n, r: UInt64(parameters.r), p: UInt64(parameters.p), length: Sealing.keySize)
        }
        return SecretBytes(consuming: &output)
    }

    /// Raw scrypt, also checked against RFC 7914's test vectors. Any parameters needing at
    /// most ``maximumMemory`` are accepted.
    static func scrypt(password: UnsafeRawBufferPointer, salt: [UInt8], n: UInt64, r: UInt64, p: UInt64, length: Int) throws -> [UInt8] {
        try CryptoRuntime.ensureInitialised()
        var output = [UInt8](repeating: 0, count: length)
        // An empty password still needs a valid pointer.
        let empty: CChar = 0
        let ok = withUnsafePointer(to: empty) { emptyPointer in
            output.withUnsafeMutableBufferPointer { out in
                EVP_PBE_scrypt(
                    password.baseAddress?.assumingMemoryBound(to: CChar.self) ?? emptyPointer, password.count,
                    salt, salt.count,
                    n, r, p, maximumMemory,
                    out.baseAddress, out.count
                )
            }
        }
        guard ok == 1 else {
            CryptoRuntime.cleanse(&output)
            throw CryptoRuntime.failure("scrypt key derivation failed")
        }
        return output
    }
}
