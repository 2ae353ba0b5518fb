/// The first run of 16 characters of any of `secrets` found in `text`, in any letter
/// case; secrets of 4 to 15 characters are looked for whole. `nil` when `text` is clean.
///
/// Deliberately independent of the library's `SecretRedactor` (a plain window-by-window
/// search), so a bug there cannot hide itself here.
package func leakedRun(in text: String, of secrets: [String]) -> String? {
    let lowered = text.lowercased()
    let haystack = Array(lowered.utf8)
    for secret in secrets {
        let bytes = Array(secret.lowercased().utf8)
        guard bytes.count >= 16 else {
            if bytes.count >= 4, lowered.contains(secret.lowercased()) { return secret }
            continue
        }
        guard haystack.count >= 16 else { continue }
        for start in 0...(bytes.count - 16) {
            let window = bytes[start..<(start + 16)]
            if (0...(haystack.count - 16)).contains(where: { haystack[$0..<($0 + 16)].elementsEqual(window) }) {
                return String(decoding: window, as: UTF8.self)
            }
        }
    }
    return nil
}
