/// The sharing scope of a keystore's items, modelled on Amplify's keychain access groups.
///
/// ``none`` keeps items private to one service (one tool): a directory only its owner can
/// read (0700, files 0600). A named group shares items between every tool whose user belongs
/// to the Unix group owning the group's directory (0770 with setgid, files 0640).
///
/// A service remembers the last access group it used. When it is opened with a different
/// group and ``migrateItemsOfUserSession`` is `true`, its items move from the previous group
/// to the new one; when it is `false`, the new group starts empty and the previous group's
/// items are left untouched (never wiped).
public struct AccessGroup: Sendable, Hashable, CustomStringConvertible {
    /// The group's name, or `nil` for ``none``.
    public let name: String?
    /// Whether opening a keystore with this group moves the service's items from the group it
    /// used last.
    public let migrateItemsOfUserSession: Bool

    /// A named access group shared through a Unix group.
    ///
    /// - Parameters:
    ///   - name: The group's name; any non-empty string (it is encoded on disk).
    ///   - migrateItemsOfUserSession: Move the service's items from its previous group on open.
    public init(name: String, migrateItemsOfUserSession: Bool = false) {
        self.name = name
        self.migrateItemsOfUserSession = migrateItemsOfUserSession
    }

    private init(privateWithMigration migrate: Bool) {
        self.name = nil
        self.migrateItemsOfUserSession = migrate
    }

    /// No access group: items are private to the service. Items left in a previous group stay
    /// there.
    public static let none = AccessGroup(privateWithMigration: false)

    /// No access group, moving the service's items from the group it used last.
    public static let noneWithMigration = AccessGroup(privateWithMigration: true)

    /// No access group, with or without migration from the group the service used last.
    public static func none(migrateItemsOfUserSession: Bool) -> AccessGroup {
        AccessGroup(privateWithMigration: migrateItemsOfUserSession)
    }

    /// Whether this is a named, shared group.
    public var isShared: Bool { name != nil }

    /// The group's name, or `none`.
    public var description: String { name ?? "none" }

    /// Two groups denote the same place when their names are equal; the migration flag is a
    /// policy, not part of the identity.
    func sameLocation(as other: AccessGroup) -> Bool { name == other.name }
}
