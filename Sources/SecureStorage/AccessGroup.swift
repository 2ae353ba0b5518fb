/// The sharing scope of a keystore's items, modelled on Amplify's keychain access groups:
/// identity only, a name or none.
///
/// ``none`` keeps items private to the user: the service's database lives in a directory only
/// its owner can enter (0700, files 0600). A named group shares items between every user of
/// the Unix group owning the group's directory (2770, database 0660, key file 0640).
///
/// Whether a keystore moves a service's items when it is opened with another group than the
/// one it used last is a separate policy,
/// ``SQLiteKeystore/Configuration/moveItemsFromPreviousGroup``; two groups are equal exactly
/// when their names are the same bytes of UTF-8 (`String`'s own `==` would also equate
/// canonically equivalent names, `café` written with `é` and with `e` and a combining accent,
/// which every engine keeps as two groups).
public struct AccessGroup: Sendable, Hashable, CustomStringConvertible {
    /// The group's name, or `nil` for ``none``.
    public let name: String?

    /// The longest name, in bytes of UTF-8, that a keystore accepts: 150.
    public static let maximumNameBytes = 150

    /// A named access group shared through a Unix group.
    ///
    /// - Parameter name: The group's name; any non-empty string of at most
    ///   ``maximumNameBytes`` bytes of UTF-8 (it is encoded on disk). A keystore opened with
    ///   another name throws ``KeystoreError/Code/invalidName``.
    public init(name: String) {
        self.name = name
    }

    private init() {
        self.name = nil
    }

    /// No access group: items are private to the user running the service.
    ///
    /// Where an optional group is expected (`AccessGroup?`), spell it `AccessGroup.none`: a
    /// bare `.none` means `Optional.none` there.
    public static let none = AccessGroup()

    /// Whether this is a named, shared group.
    public var isShared: Bool { name != nil }

    /// The group's name, or `none`.
    public var description: String { name ?? "none" }

    /// Whether the two groups are one namespace: both none, or names of the same bytes.
    public static func == (lhs: AccessGroup, rhs: AccessGroup) -> Bool {
        switch (lhs.name, rhs.name) {
        case (nil, nil): true
        case let (left?, right?): left.utf8.elementsEqual(right.utf8)
        default: false
        }
    }

    /// Hashes the name's bytes, as ``==(_:_:)`` compares them.
    public func hash(into hasher: inout Hasher) {
        guard let name else {
            hasher.combine(0 as UInt8)
            return
        }
        hasher.combine(1 as UInt8)
        for byte in name.utf8 { hasher.combine(byte) }
    }
}
