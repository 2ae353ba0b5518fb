internal import CLibCrypto

/// Passphrase-based keys through scrypt (`EVP_PBE_scrypt`).
enum KeyDerivation {
    /// scrypt cost: N = 2^15, r = 8, p = 1 (about 32 MiB and tens of milliseconds), the
    /// interactive-login parameters recommended by scrypt's author.
    static let n: UInt64 = 1 << 15
    static let r: UInt64 = 8
    static let p: UInt64 = 1
    static let maxMemory: UInt64 = 64 << 20
    static let saltSize = 16

    static func scrypt(passphrase: SecretBytes, salt: [UInt8]) throws -> SecretBytes {
        var output = try passphrase.withUnsafeBytes { pass in
            try scrypt(password: pass, salt: salt, n: n, r: r, p: p, length: Sealing.keySize)
        }
        return SecretBytes(consuming: &output)
    }

    /// Raw scrypt, also checked against RFC 7914's test vectors.
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
                    n, r, p, maxMemory,
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
