extension StringProtocol {
    /// At most `limit` Unicode scalars of the text. A bound on what text from a peer can
    /// cost, which `prefix(_:)` is not: it counts grapheme clusters, and one base character
    /// followed by a megabyte of combining marks is a single `Character`.
    func prefix(scalars limit: Int) -> String {
        String(String.UnicodeScalarView(unicodeScalars.prefix(limit)))
    }

    /// Whether the text holds more than `limit` Unicode scalars (stops counting there).
    func exceeds(scalars limit: Int) -> Bool {
        unicodeScalars.dropFirst(limit).first != nil
    }
}
