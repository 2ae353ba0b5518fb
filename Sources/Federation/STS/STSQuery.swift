/// The AWS Query protocol's form encoding of an STS request
/// (`application/x-www-form-urlencoded`), with AWS's percent-encoding: every byte
/// outside `A-Z a-z 0-9 - _ . ~` becomes `%XX` (upper-case hex; a space is `%20`,
/// never `+`).
struct STSQuery: Sendable {
    /// The parameters in the order they are sent.
    private(set) var parameters: [(name: String, value: String)] = []

    init(action: String, version: String = "2011-06-15") {
        append("Action", action)
        append("Version", version)
    }

    /// Adds `name=value`.
    mutating func append(_ name: String, _ value: String) {
        parameters.append((name, value))
    }

    /// Adds `name=value` when `value` is not `nil`.
    mutating func append(_ name: String, _ value: String?) {
        if let value { append(name, value) }
    }

    /// The body: `name=value` pairs joined by `&`, both sides percent-encoded.
    var body: [UInt8] {
        var output: [UInt8] = []
        for (position, parameter) in parameters.enumerated() {
            if position > 0 { output.append(UInt8(ascii: "&")) }
            Self.encode(parameter.name, into: &output)
            output.append(UInt8(ascii: "="))
            Self.encode(parameter.value, into: &output)
        }
        return output
    }

    /// `text` percent-encoded as AWS expects.
    static func percentEncoded(_ text: String) -> String {
        var output: [UInt8] = []
        encode(text, into: &output)
        return String(decoding: output, as: UTF8.self)
    }

    private static func encode(_ text: String, into output: inout [UInt8]) {
        let hex = Array("0123456789ABCDEF".utf8)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                output.append(byte)
            default:
                output.append(UInt8(ascii: "%"))
                output.append(hex[Int(byte >> 4)])
                output.append(hex[Int(byte & 0x0F)])
            }
        }
    }
}
