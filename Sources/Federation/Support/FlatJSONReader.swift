import SecureStorage

/// The JSON primitives of the direct readers (the stored record's, the Cognito responses'):
/// strictly JSON's grammar, with no whitespace anywhere, each returning `nil` (or `false`)
/// for anything it does not read exactly, so that its caller leaves that input to
/// `JSONDecoder`, which then reads or rejects it. A reader that answers must answer what
/// `JSONDecoder` would: strings are valid UTF-8 with no raw control character and no lone
/// surrogate escape, numbers follow JSON's number grammar.
struct FlatJSONReader {
    private let bytes: [UInt8]
    private var index = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Whether every byte was read.
    var isAtEnd: Bool { index == bytes.count }

    /// Reads an object, calling `member` with each key; `member` reads the value and returns
    /// whether it could. `false` at the first member that could not be read, or when the
    /// object is not well-formed.
    mutating func members(_ member: (inout FlatJSONReader, String) -> Bool) -> Bool {
        guard next() == UInt8(ascii: "{") else { return false }
        if peek() == UInt8(ascii: "}") {
            index += 1
            return true
        }
        while true {
            guard let key = string(), next() == UInt8(ascii: ":"), member(&self, key) else { return false }
            switch next() {
            case UInt8(ascii: ","): continue
            case UInt8(ascii: "}"): return true
            default: return false
            }
        }
    }

    mutating func next() -> UInt8? {
        guard index < bytes.count else { return nil }
        defer { index += 1 }
        return bytes[index]
    }

    func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

    mutating func literalNull() -> Bool {
        guard bytes.count - index >= 4, bytes[index] == UInt8(ascii: "n"), bytes[index + 1] == UInt8(ascii: "u"),
              bytes[index + 2] == UInt8(ascii: "l"), bytes[index + 3] == UInt8(ascii: "l")
        else { return false }
        index += 4
        return true
    }

    /// Reads a non-empty string into `slot`, which must still be `nil`: an empty string or a
    /// repeated key is refused (`false`).
    mutating func nonEmptyString(into slot: inout String?) -> Bool {
        guard slot == nil, let value = string(), !value.isEmpty else { return false }
        slot = value
        return true
    }

    mutating func optionalString(_ slot: inout String?) -> Bool {
        if literalNull() { return true }
        guard let text = string() else { return false }
        slot = text
        return true
    }

    /// A string with no raw control character, as valid UTF-8.
    mutating func string() -> String? {
        guard next() == UInt8(ascii: "\"") else { return nil }
        // Most strings hold no escape: read them straight from the body, with no buffer.
        var end = index
        while end < bytes.count, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\"), bytes[end] >= 0x20 {
            end += 1
        }
        if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
            defer { index = end + 1 }
            return String(validating: bytes[index..<end], as: UTF8.self)
        }
        var text: [UInt8] = []
        defer { CryptoRuntime.cleanse(&text) }
        while let byte = next() {
            switch byte {
            case UInt8(ascii: "\""):
                return String(validating: text, as: UTF8.self)
            case UInt8(ascii: "\\"):
                switch next() {
                case UInt8(ascii: "\""): text.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): text.append(UInt8(ascii: "\\"))
                case UInt8(ascii: "/"): text.append(UInt8(ascii: "/"))
                case UInt8(ascii: "b"): text.append(0x08)
                case UInt8(ascii: "f"): text.append(0x0C)
                case UInt8(ascii: "n"): text.append(0x0A)
                case UInt8(ascii: "r"): text.append(0x0D)
                case UInt8(ascii: "t"): text.append(0x09)
                case UInt8(ascii: "u"):
                    guard let scalar = escapedScalar() else { return nil }
                    text.append(contentsOf: Array(String(Character(scalar)).utf8))
                default: return nil
                }
            case 0..<0x20:
                return nil
            default:
                text.append(byte)
            }
        }
        return nil
    }

    /// The scalar of a `\uXXXX` escape whose `\u` was just read, a surrogate pair taking two;
    /// `nil` for a lone surrogate.
    private mutating func escapedScalar() -> Unicode.Scalar? {
        guard let first = hex4() else { return nil }
        if (0xD800..<0xDC00).contains(first) {
            guard next() == UInt8(ascii: "\\"), next() == UInt8(ascii: "u"), let second = hex4(), (0xDC00..<0xE000).contains(second)
            else { return nil }
            return Unicode.Scalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
        }
        return Unicode.Scalar(first)
    }

    private mutating func hex4() -> UInt32? {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = next() else { return nil }
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    /// A number in JSON's grammar: `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`.
    mutating func number() -> String? {
        let start = index
        func digits(_ reader: inout FlatJSONReader) -> Int {
            var count = 0
            while let byte = reader.peek(), byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                reader.index += 1
                count += 1
            }
            return count
        }
        if peek() == UInt8(ascii: "-") { index += 1 }
        if peek() == UInt8(ascii: "0") {
            index += 1
        } else {
            guard let first = peek(), first >= UInt8(ascii: "1"), first <= UInt8(ascii: "9") else { return nil }
            _ = digits(&self)
        }
        if peek() == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { return nil }
        }
        if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
            index += 1
            if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
            guard digits(&self) > 0 else { return nil }
        }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }
}
