import CLibCrypto

/// SHA-256 and HMAC-SHA-256 through libcrypto, beside the keystore's other libcrypto
/// calls: Federation's SigV4 signer uses both (the keystore itself uses neither).
package enum Digest {
    /// The SHA-256 of `bytes`.
    package static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        bytes.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { output in
                _ = SHA256(input.baseAddress, input.count, output.baseAddress)
            }
        }
        return out
    }

    /// The HMAC-SHA-256 of `message` under `key`.
    ///
    /// - Throws: ``KeystoreError/Code/cryptoFailure`` with OpenSSL's error when libcrypto
    ///   fails (for example a provider that refuses HMAC or SHA-256).
    package static func hmacSHA256(key: [UInt8], _ message: [UInt8]) throws(KeystoreError) -> [UInt8] {
        try CryptoRuntime.ensureInitialised()
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = key.withUnsafeBufferPointer { keyBytes in
            message.withUnsafeBufferPointer { input in
                out.withUnsafeMutableBufferPointer { output in
                    HMAC(EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count), input.baseAddress, input.count, output.baseAddress, &length) != nil
                }
            }
        }
        guard ok, length == 32 else {
            throw CryptoRuntime.failure("HMAC-SHA-256 failed")
        }
        return out
    }

    /// Lowercase hexadecimal.
    package static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
