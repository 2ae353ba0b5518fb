/// Writes one flat JSON object: the session record's stored form and the Cognito request
/// bodies, which have a few string, number and string-map fields each.
///
/// Why not `JSONEncoder`: its generic machinery was about a tenth of a federation's CPU at
/// concurrency 1 (two request bodies and one stored record per federation; docs/performance.md
/// §3a). The output is what `JSONEncoder` with default options writes for the same fields,
/// byte for byte except the order of keys (which `JSONEncoder` does not fix either): the same
/// escapes, `\/` included, `nil` fields left out, and numbers as `JSONEncoder` prints them,
/// so every reader of either reads both. `JSONObjectWriterTests` holds it to that.
struct JSONObjectWriter {
    private var bytes: [UInt8]
    private var empty = true

    init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
        bytes.append(UInt8(ascii: "{"))
    }

    /// Adds `"key":"value"`; nothing for `nil`.
    mutating func add(_ key: String, _ value: String?) {
        guard let value else { return }
        member(key)
        string(value)
    }

    /// Adds `"key":{"k":"v",…}`; nothing for `nil`.
    mutating func add(_ key: String, _ value: [String: String]?) {
        guard let value else { return }
        member(key)
        bytes.append(UInt8(ascii: "{"))
        var first = true
        for (name, text) in value {
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            string(name)
            bytes.append(UInt8(ascii: ":"))
            string(text)
        }
        bytes.append(UInt8(ascii: "}"))
    }

    /// Adds `"key":value`.
    mutating func add(_ key: String, _ value: Int) {
        member(key)
        bytes.append(contentsOf: String(value).utf8)
    }

    /// Adds `"key":value` as `JSONEncoder` prints a `Double` (its `description` without a
    /// trailing `.0`); nothing for `nil`. Only finite values: `JSONEncoder` refuses others.
    mutating func add(_ key: String, _ value: Double?) throws(NonFiniteNumber) {
        guard let value else { return }
        guard value.isFinite else { throw NonFiniteNumber() }
        member(key)
        var text = value.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        bytes.append(contentsOf: text.utf8)
    }

    /// A `Double` that is infinite or NaN, which JSON cannot hold.
    struct NonFiniteNumber: Error {}

    /// The object's bytes, closed.
    consuming func finish() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

    private mutating func member(_ key: String) {
        if !empty { bytes.append(UInt8(ascii: ",")) }
        empty = false
        string(key)
        bytes.append(UInt8(ascii: ":"))
    }

    /// A JSON string with `JSONEncoder`'s escapes: `"`, `\`, `/`, the two-letter forms for
    /// backspace, form feed, newline, carriage return and tab, `\u00XX` for the other control
    /// characters; everything else as its UTF-8.
    private mutating func string(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { utf8 in
            // Runs that need no escape (most of every string) are copied whole.
            var run = 0
            for (offset, byte) in utf8.enumerated() where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == UInt8(ascii: "/") {
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[run..<offset]))
                escape(byte)
                run = offset + 1
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[run...]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// `byte` (one that needs it) as its escape.
    private mutating func escape(_ byte: UInt8) {
        let escaped: UInt8
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): escaped = byte
        case 0x08: escaped = UInt8(ascii: "b")
        case 0x0C: escaped = UInt8(ascii: "f")
        case 0x0A: escaped = UInt8(ascii: "n")
        case 0x0D: escaped = UInt8(ascii: "r")
        case 0x09: escaped = UInt8(ascii: "t")
        default:
            let hex = Array("0123456789abcdef".utf8)
            bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]])
            return
        }
        bytes.append(UInt8(ascii: "\\"))
        bytes.append(escaped)
    }
}
