/// What every engine accepts as an item's key, and how keys are told apart.
package enum ItemKey {
    /// The longest item key, in UTF-8 bytes (documented in GettingStarted).
    package static let maximumBytes = 180

    /// A key compared by its UTF-8 bytes, as every engine stores and looks keys up.
    ///
    /// `String`'s equality is canonical equivalence: `"caf\u{E9}"` (precomposed) equals
    /// `"cafe\u{301}"` (a combining accent), so two distinct items, in a `String`-keyed
    /// dictionary or set, would share one entry: a read answered with the other item, a
    /// change reported for one key only.
    package struct Exact: Hashable, Sendable {
        package let bytes: [UInt8]

        package init(_ key: String) { bytes = Array(key.utf8) }

        /// The key as text, byte for byte.
        package var key: String { String(decoding: bytes, as: UTF8.self) }
    }
}
