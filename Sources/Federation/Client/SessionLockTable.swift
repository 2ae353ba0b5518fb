/// Per-session mutual exclusion for the client's actor: federations and clears of one
/// session run one at a time, in arrival order; different sessions never wait for each
/// other. The table only records who holds and who waits; the actor does the waiting.
struct SessionLockTable {
    /// A caller waiting for a session's lock: resumed with `true` holding it, or with
    /// `false` when it was withdrawn (its task was cancelled).
    typealias Waiter = CheckedContinuation<Bool, Never>

    private var waiters: [String: [(id: UInt64, continuation: Waiter)]] = [:]
    private var nextID: UInt64 = 0

    /// Takes `session`'s lock when it is free; returns `false` when the caller must wait.
    mutating func tryAcquire(_ session: String) -> Bool {
        guard waiters[session] == nil else { return false }
        waiters[session] = []
        return true
    }

    /// An identity for the next waiter, to withdraw it by.
    mutating func newWaiterID() -> UInt64 {
        nextID &+= 1
        return nextID
    }

    /// Queues a waiter; it is resumed holding the lock.
    mutating func enqueue(_ session: String, id: UInt64, _ continuation: Waiter) {
        waiters[session, default: []].append((id, continuation))
    }

    /// Takes waiter `id` out of `session`'s queue when it still waits (returned, to be
    /// resumed with `false`); `nil` when it was handed the lock already.
    mutating func withdraw(_ session: String, id: UInt64) -> Waiter? {
        guard let index = waiters[session]?.firstIndex(where: { $0.id == id }) else { return nil }
        return waiters[session]?.remove(at: index).continuation
    }

    /// Releases `session`'s lock, handing it to the next waiter (returned, to be resumed
    /// with `true`).
    mutating func release(_ session: String) -> Waiter? {
        guard var queue = waiters[session], !queue.isEmpty else {
            waiters[session] = nil
            return nil
        }
        let next = queue.removeFirst()
        waiters[session] = queue
        return next.continuation
    }

    /// Whether anyone holds or waits for `session`.
    func isHeld(_ session: String) -> Bool { waiters[session] != nil }
}
