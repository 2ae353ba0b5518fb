/// What a command-line value looks like: the shapes the CLI uses to tell a path from a secret
/// pasted where a path or a name belongs.
enum ArgumentShape {
    /// Whether `text` starts like a path: `/`, `./`, `../` or `~/`.
    static func startsLikeAPath(_ text: String) -> Bool {
        ["/", "./", "../", "~/"].contains { text.utf8.starts(with: $0.utf8) }
    }

    /// An ASCII letter or digit.
    static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
    }

    /// A byte of base64url's alphabet (JWT parts): letters, digits, `-` and `_`.
    static func isBase64URL(_ byte: UInt8) -> Bool {
        isAlphanumeric(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
    }

    /// A byte of standard base64 with its padding: letters, digits, `+`, `/` and `=`.
    static func isStandardBase64(_ byte: UInt8) -> Bool {
        isAlphanumeric(byte) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "/") || byte == UInt8(ascii: "=")
    }
}
