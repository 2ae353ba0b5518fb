/// What rotating a namespace's key did (`SQLiteKeystore.rekey`, `PostgresKeystore.rekey`).
///
/// A rotation seals the namespace's key check with the key source's sealing key, then
/// re-seals with it every item that one of its ``KeySource/alsoOpening(_:)`` keys opens.
/// Items no key opens are left as they were and counted: nothing is lost, and a
/// rotation run again with their key among the opening ones re-seals them.
public struct KeyRotation: Sendable, Equatable, CustomStringConvertible {
    /// Items an opening key opened, now sealed with the sealing key.
    public var resealed = 0
    /// Items the sealing key already opened, left as they were.
    public var alreadySealed = 0
    /// Items no key of the source opens (damaged, or sealed with a key not given), left as
    /// they were.
    public var unreadable = 0
    /// The keys of the first unreadable items (at most ``unreadableKeysListed``), in the
    /// namespace's order: keys are names, never secrets.
    public var unreadableKeys: [String] = []

    /// Whether the namespace's key check is now sealed with the sealing key: `false` when the
    /// namespace holds nothing sealed (no check, no item: a mistyped group, say), where a
    /// rotation changes nothing. A namespace whose items were all removed keeps its check,
    /// which moves.
    public var keyCheckMoved = false

    /// How many unreadable items ``unreadableKeys`` names at most.
    public static let unreadableKeysListed = 10

    /// A rotation that found nothing to do.
    public init() {}

    /// Whether every item of the namespace now opens with the sealing key.
    public var isComplete: Bool { unreadable == 0 }

    /// Adds what `other` (a later batch of the same rotation) counted.
    package mutating func add(_ other: KeyRotation) {
        resealed += other.resealed
        alreadySealed += other.alreadySealed
        unreadable += other.unreadable
        unreadableKeys += other.unreadableKeys.prefix(Self.unreadableKeysListed - unreadableKeys.count)
    }

    /// Counts an item no key opened.
    package mutating func noteUnreadable(_ key: String) {
        unreadable += 1
        if unreadableKeys.count < Self.unreadableKeysListed { unreadableKeys.append(key) }
    }

    /// `resealed N, already sealed N, unreadable N`, or `nothing sealed` when the check did
    /// not move.
    public var description: String {
        keyCheckMoved ? "resealed \(resealed), already sealed \(alreadySealed), unreadable \(unreadable)" : "nothing sealed"
    }
}
