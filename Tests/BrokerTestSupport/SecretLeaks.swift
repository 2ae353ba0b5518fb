/// The first run of 16 characters of any of `secrets` found in `text`, in any letter
/// case; secrets of 4 to 15 characters are looked for whole. `nil` when `text` is clean.
///
/// `text` is also read with its JSON escapes (`\/`, `\u002f`, …) and its percent-encoding
/// (`%2F`) undone, up to three layers deep, so a secret that reached the text through a JSON
/// encoder or a URL is found too: a secret key holds a `/` in every run of 16 characters.
///
/// Deliberately independent of the library's `SecretRedactor` (a plain window-by-window
/// search), so a bug there cannot hide itself here.
package func leakedRun(in text: String, of secrets: [String]) -> String? {
    // Every reading three decodings deep, either kind in any order: JSON inside a JSON
    // string (`\\/`), a percent-encoded JSON body (`%5C%2F`).
    var readings = [Array(text.lowercased().utf8)]
    var newest = readings
    for _ in 0..<3 {
        newest = newest.flatMap { [jsonUnescaped($0), percentDecoded($0)] }.filter { !readings.contains($0) }
        readings += newest
    }
    for secret in secrets {
        let bytes = Array(secret.lowercased().utf8)
        guard bytes.count >= 4 else { continue }
        let length = min(bytes.count, 16)
        for start in 0...(bytes.count - length) {
            let window = bytes[start..<(start + length)]
            for haystack in readings where haystack.count >= length {
                if (0...(haystack.count - length)).contains(where: { haystack[$0..<($0 + length)].elementsEqual(window) }) {
                    return String(decoding: window, as: UTF8.self)
                }
            }
        }
    }
    return nil
}

/// `bytes` with JSON's escapes undone: `\/`, `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t` and
/// `\uXXXX` for the ASCII range (lowered, as the text is); anything else stays as it is.
private func jsonUnescaped(_ bytes: [UInt8]) -> [UInt8] {
    let simple: [UInt8: UInt8] = [
        UInt8(ascii: "/"): UInt8(ascii: "/"), UInt8(ascii: "\""): UInt8(ascii: "\""), UInt8(ascii: "\\"): UInt8(ascii: "\\"),
        UInt8(ascii: "b"): 8, UInt8(ascii: "f"): 12, UInt8(ascii: "n"): 10, UInt8(ascii: "r"): 13, UInt8(ascii: "t"): 9,
    ]
    return decoded(bytes, introducedBy: UInt8(ascii: "\\")) { rest in
        guard let escaped = rest.first else { return nil }
        if let plain = simple[escaped] { return (plain, 1) }
        guard escaped == UInt8(ascii: "u"), rest.count >= 5, let value = hexValue(rest.dropFirst().prefix(4)), value < 0x80 else { return nil }
        return (UInt8(value), 5)
    }
}

/// `bytes` with `%XX` sequences decoded (lowered, as the text is).
private func percentDecoded(_ bytes: [UInt8]) -> [UInt8] {
    decoded(bytes, introducedBy: UInt8(ascii: "%")) { rest in
        guard rest.count >= 2, let value = hexValue(rest.prefix(2)) else { return nil }
        return (UInt8(value), 2)
    }
}

/// `bytes` with every sequence that `marker` introduces and `decode` reads (the byte it
/// stands for, and how many bytes after the marker it takes) replaced by that byte, lowered;
/// a marker `decode` does not read stays as it is.
private func decoded(
    _ bytes: [UInt8], introducedBy marker: UInt8, _ decode: (ArraySlice<UInt8>) -> (byte: UInt8, length: Int)?
) -> [UInt8] {
    var result: [UInt8] = []
    result.reserveCapacity(bytes.count)
    var index = 0
    while index < bytes.count {
        if bytes[index] == marker, let (byte, length) = decode(bytes[(index + 1)...]) {
            result.append(byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte + 32 : byte)
            index += 1 + length
        } else {
            result.append(bytes[index])
            index += 1
        }
    }
    return result
}

private func hexValue(_ digits: ArraySlice<UInt8>) -> Int? {
    var value = 0
    for digit in digits {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): value = value * 16 + Int(digit - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): value = value * 16 + Int(digit - UInt8(ascii: "a")) + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): value = value * 16 + Int(digit - UInt8(ascii: "A")) + 10
        default: return nil
        }
    }
    return value
}
