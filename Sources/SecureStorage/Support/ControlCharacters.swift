/// Text that came from outside (a name a member of a shared group planted in a database, an
/// SQLite or PostgreSQL message quoting one) made harmless for messages a person reads: no
/// control character can move a terminal's cursor, recolour it or end a log line, and no
/// bidirectional formatting character can reorder what a reader sees.
extension Unicode.Scalar {
    /// C0 controls, DEL, C1 controls, and the bidirectional marks, embeddings, overrides and
    /// isolates (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069).
    package var isControlOrBidirectionalFormat: Bool {
        switch value {
        case 0x00...0x1F, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}

extension StringProtocol {
    /// The text with each control or bidirectional formatting character written as `\u{…}`
    /// (hexadecimal); the text itself, with no copy, when it has none.
    package var escapingControlCharacters: String {
        guard unicodeScalars.contains(where: \.isControlOrBidirectionalFormat) else { return String(self) }
        var escaped = String.UnicodeScalarView()
        for scalar in unicodeScalars {
            if scalar.isControlOrBidirectionalFormat {
                escaped.append(contentsOf: "\\u{\(String(scalar.value, radix: 16, uppercase: true))}".unicodeScalars)
            } else {
                escaped.append(scalar)
            }
        }
        return String(escaped)
    }
}
