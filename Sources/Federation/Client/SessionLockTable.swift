/// Per-session mutual exclusion for the client's actor: federations and clears of one
/// session run one at a time, in arrival order; different sessions never wait for each
/// other. The table only records who holds and who waits; the actor does the waiting.
struct SessionLockTable {
    private var waiters: [String: [CheckedContinuation<Void, Never>]] = [:]

    /// Takes `session`'s lock when it is free; returns `false` when the caller must wait.
    mutating func tryAcquire(_ session: String) -> Bool {
        guard waiters[session] == nil else { return false }
        waiters[session] = []
        return true
    }

    /// Queues a waiter; it is resumed holding the lock.
    mutating func enqueue(_ session: String, _ continuation: CheckedContinuation<Void, Never>) {
        waiters[session, default: []].append(continuation)
    }

    /// Releases `session`'s lock, handing it to the next waiter (returned, to be resumed).
    mutating func release(_ session: String) -> CheckedContinuation<Void, Never>? {
        guard var queue = waiters[session], !queue.isEmpty else {
            waiters[session] = nil
            return nil
        }
        let next = queue.removeFirst()
        waiters[session] = queue
        return next
    }

    /// Whether anyone holds or waits for `session`.
    func isHeld(_ session: String) -> Bool { waiters[session] != nil }
}
