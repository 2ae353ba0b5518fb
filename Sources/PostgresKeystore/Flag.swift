import Synchronization

/// A flag that is set once and read from any task: whether a call got its connection, or
/// whether its body has finished with it.
final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}
