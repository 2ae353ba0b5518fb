/// The evicted sessions waiting to be read back for observers of every session (their expiry
/// fell due), in the order they fell due, each once; and whether a reader is draining them.
struct EvictedReadBacks: Sendable {
    private var waiting: [String] = []
    private var head = 0
    private var queued: Set<String> = []
    private var isReading = false

    /// Queues `session` unless it waits already; `true` when no reader runs, so the caller
    /// must start one (which is then counted as running).
    mutating func queue(_ session: String) -> Bool {
        if queued.insert(session).inserted { waiting.append(session) }
        defer { isReading = true }
        return !isReading
    }

    /// The next session to read back, or `nil` when none waits.
    mutating func next() -> String? {
        guard head < waiting.count else { return nil }
        let session = waiting[head]
        head += 1
        queued.remove(session)
        // What was taken goes once it is most of the array, so a queue that never empties
        // does not keep every session it ever held.
        if head == waiting.count || head > max(64, waiting.count / 2) {
            waiting.removeFirst(head)
            head = 0
        }
        return session
    }

    /// The reader ended: the next ``queue(_:)`` starts another.
    mutating func readerEnded() { isReading = false }
}
