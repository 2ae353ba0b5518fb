/// Removes from text every run of ``minimumRun`` or more characters taken from a
/// secret, in any letter case.
///
/// An exact-match scrub is not enough: a service (or a proxy in the path) may echo
/// the first 150 characters of a token, only its JWT signature, the token
/// upper-cased, or the token inside a header. Any 16 consecutive bytes of a secret
/// are treated as the secret, so a prefix, a suffix, any JWT part and any case
/// variant are caught alike. Matching is on UTF-8 bytes with ASCII case folded.
///
/// Built only on error paths, from the secrets of one request: about one set entry
/// per byte of secret.
package struct SecretRedactor: Sendable {
    /// The shortest run of a secret that is redacted.
    package static let minimumRun = 16
    /// What a redacted run becomes.
    package static let replacement = "<redacted>"

    /// Sixteen case-folded bytes, exactly (two words, so no false positives).
    private struct Window: Hashable {
        var high: UInt64
        var low: UInt64
    }

    private let windows: Set<Window>
    /// Secrets shorter than a window, matched whole.
    private let shortSecrets: [[UInt8]]

    /// A redactor for `secrets`; secrets shorter than ``minimumRun`` bytes are
    /// matched whole (case-folded) when they have at least 4 bytes, and ignored below that.
    package init(secrets: some Sequence<String>) {
        var windows = Set<Window>()
        var short: [[UInt8]] = []
        for secret in secrets {
            let bytes = secret.utf8.map(Self.fold)
            if bytes.count >= Self.minimumRun {
                for start in 0...(bytes.count - Self.minimumRun) {
                    windows.insert(Self.window(bytes, at: start))
                }
            } else if bytes.count >= 4 {
                short.append(bytes)
            }
        }
        self.windows = windows
        self.shortSecrets = short
    }

    /// Whether the redactor has anything to look for.
    package var isEmpty: Bool { windows.isEmpty && shortSecrets.isEmpty }

    /// `text` with every run of a secret replaced by ``replacement``.
    package func redact(_ text: String) -> String {
        guard !isEmpty else { return text }
        let bytes = Array(text.utf8)
        let folded = bytes.map(Self.fold)
        var hidden = [Bool](repeating: false, count: bytes.count)
        var found = false
        if bytes.count >= Self.minimumRun, !windows.isEmpty {
            for start in 0...(bytes.count - Self.minimumRun) where windows.contains(Self.window(folded, at: start)) {
                for index in start..<(start + Self.minimumRun) { hidden[index] = true }
                found = true
            }
        }
        for secret in shortSecrets where secret.count <= folded.count {
            for start in 0...(folded.count - secret.count) where folded[start..<(start + secret.count)].elementsEqual(secret) {
                for index in start..<(start + secret.count) { hidden[index] = true }
                found = true
            }
        }
        guard found else { return text }
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if hidden[index] {
                output.append(contentsOf: Self.replacement.utf8)
                while index < bytes.count && hidden[index] { index += 1 }
            } else {
                output.append(bytes[index])
                index += 1
            }
        }
        // A run may start inside a multi-byte character; decoding repairs what is left of it.
        return String(decoding: output, as: UTF8.self)
    }

    /// Whether `text` holds a run of a secret (what ``redact(_:)`` would change).
    package func matches(_ text: String) -> Bool {
        redact(text) != text
    }

    private static func fold(_ byte: UInt8) -> UInt8 {
        byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte
    }

    private static func window(_ bytes: [UInt8], at start: Int) -> Window {
        var high: UInt64 = 0
        var low: UInt64 = 0
        for offset in 0..<8 {
            high = high << 8 | UInt64(bytes[start + offset])
            low = low << 8 | UInt64(bytes[start + 8 + offset])
        }
        return Window(high: high, low: low)
    }
}
