/// What every engine accepts as an item's key: 1 to ``maximumBytes`` bytes of UTF-8.
package enum ItemKey {
    /// The longest item key, in UTF-8 bytes (documented in GettingStarted).
    package static let maximumBytes = 180
}
