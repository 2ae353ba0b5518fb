/// Base64 (RFC 4648 §4) decoding for keys, unpadded base64url (§5) for file names, and
/// base64url decoding for Federation's JWT parts: the package's one base64, kept here so
/// neither module needs Foundation for it.
package enum Base64 {
    private static let standard = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let url = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    private static let decodeTable: [Int8] = {
        var table = [Int8](repeating: -1, count: 256)
        for (index, byte) in standard.enumerated() { table[Int(byte)] = Int8(index) }
        table[Int(UInt8(ascii: "-"))] = 62
        table[Int(UInt8(ascii: "_"))] = 63
        return table
    }()

    /// Unpadded base64url: safe as a file name (no `/`, no leading `.`, never `.` or `..`).
    static func urlEncode(_ bytes: some Collection<UInt8>) -> String {
        let input = Array(bytes)
        var out = [UInt8]()
        out.reserveCapacity((input.count + 2) / 3 * 4)
        var index = 0
        while index + 3 <= input.count {
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            out.append(url[Int(value >> 18 & 63)]); out.append(url[Int(value >> 12 & 63)])
            out.append(url[Int(value >> 6 & 63)]); out.append(url[Int(value & 63)])
            index += 3
        }
        let rest = input.count - index
        if rest == 1 {
            let value = UInt32(input[index]) << 16
            out.append(url[Int(value >> 18 & 63)]); out.append(url[Int(value >> 12 & 63)])
        } else if rest == 2 {
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            out.append(url[Int(value >> 18 & 63)]); out.append(url[Int(value >> 12 & 63)])
            out.append(url[Int(value >> 6 & 63)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes standard or url alphabet, padded or not; ignores surrounding whitespace.
    /// Returns `nil` on any other character or an impossible length.
    package static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        var symbols = [UInt8]()
        symbols.reserveCapacity(text.count)
        var sawPadding = false
        for byte in text {
            switch byte {
            case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"):
                continue
            case UInt8(ascii: "="):
                sawPadding = true
            default:
                guard !sawPadding else { return nil }
                let value = decodeTable[Int(byte)]
                guard value >= 0 else { return nil }
                symbols.append(UInt8(value))
            }
        }
        guard symbols.count % 4 != 1 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(symbols.count * 3 / 4)
        var index = 0
        while index + 4 <= symbols.count {
            let value = UInt32(symbols[index]) << 18 | UInt32(symbols[index + 1]) << 12
                | UInt32(symbols[index + 2]) << 6 | UInt32(symbols[index + 3])
            out.append(UInt8(value >> 16 & 0xFF)); out.append(UInt8(value >> 8 & 0xFF)); out.append(UInt8(value & 0xFF))
            index += 4
        }
        let rest = symbols.count - index
        if rest >= 2 {
            var value = UInt32(symbols[index]) << 18 | UInt32(symbols[index + 1]) << 12
            if rest == 3 { value |= UInt32(symbols[index + 2]) << 6 }
            out.append(UInt8(value >> 16 & 0xFF))
            if rest == 3 { out.append(UInt8(value >> 8 & 0xFF)) }
        }
        CryptoRuntime.cleanse(&symbols)
        return out
    }

    static func urlDecode(_ text: String) -> [UInt8]? { decode(text.utf8) }

    private static let standardTable: [Int8] = {
        var table = [Int8](repeating: -1, count: 256)
        for (index, byte) in standard.enumerated() { table[Int(byte)] = Int8(index) }
        return table
    }()

    /// Strict decoding for keys: the canonical RFC 4648 §4 form only, so that each byte string
    /// has exactly one accepted text. Spaces, tabs, CR and LF around the text are trimmed;
    /// inside it, only the standard alphabet, a length that is a multiple of 4, `=` padding
    /// exactly as long as needed and nowhere else, and zero unused bits in the last symbol.
    /// Returns `nil` for anything else (including empty text).
    static func decodeCanonical<Text: BidirectionalCollection<UInt8>>(_ text: Text) -> [UInt8]? {
        func isSpace(_ byte: UInt8) -> Bool {
            byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r")
        }
        let body = text.trimming(while: isSpace)
        let count = body.count
        guard count > 0, count % 4 == 0 else { return nil }

        var out = [UInt8]()
        out.reserveCapacity(count / 4 * 3)
        var group: UInt32 = 0
        var position = 0
        var padding = 0
        for byte in body {
            position += 1
            var value: UInt32 = 0
            if byte == UInt8(ascii: "=") {
                // Padding: only in the last two positions.
                guard position > count - 2 else { CryptoRuntime.cleanse(&out); return nil }
                padding += 1
            } else {
                let symbol = standardTable[Int(byte)]
                guard padding == 0, symbol >= 0 else { CryptoRuntime.cleanse(&out); return nil }
                value = UInt32(symbol)
            }
            group = group << 6 | value
            if position % 4 == 0 {
                out.append(UInt8(group >> 16 & 0xFF)); out.append(UInt8(group >> 8 & 0xFF)); out.append(UInt8(group & 0xFF))
                group = 0
            }
        }
        // The bytes standing for padding hold the last symbol's unused bits: they must be zero.
        let unused = out.suffix(padding)
        guard unused.allSatisfy({ $0 == 0 }) else { CryptoRuntime.cleanse(&out); return nil }
        out.removeLast(padding)
        return out
    }
}
