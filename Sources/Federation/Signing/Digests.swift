internal import CLibCrypto

/// SHA-256 and HMAC-SHA-256 through the system's libcrypto.
enum Digests {
    static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        LibraryBootstrap.ensure()
        var output = [UInt8](repeating: 0, count: 32)
        bytes.withUnsafeBufferPointer { input in
            output.withUnsafeMutableBufferPointer { out in
                _ = SHA256(input.baseAddress, input.count, out.baseAddress)
            }
        }
        return output
    }

    static func hmacSHA256(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        LibraryBootstrap.ensure()
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 32
        key.withUnsafeBufferPointer { keyBytes in
            message.withUnsafeBufferPointer { input in
                output.withUnsafeMutableBufferPointer { out in
                    _ = HMAC(EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count), input.baseAddress, input.count, out.baseAddress, &length)
                }
            }
        }
        return output
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
