/// Reads of sessions, and this client's writes of them, while they wait for the store.
///
/// A change the feed reports meanwhile may have replaced what such a read returns, and
/// nothing would correct it once cached: the feed ignores sessions the client does not
/// hold, and a reload racing the read is dropped when the read caches first. So the
/// feed marks the calls in flight: a marked first read is read again, a marked read outside
/// the one-at-a-time re-reads is dropped, a marked re-read is applied and followed by the
/// re-read the change asked for, and a marked write, once applied, is followed by a re-read
/// (the change may come after it).
struct CallsInFlight: Sendable {
    private struct Reads: Sendable {
        var count = 0
        var changes: UInt64 = 0
    }

    private var reads: [String: Reads] = [:]

    /// A read of `session` starts; returns what ``end(_:began:)`` compares.
    mutating func begin(_ session: String) -> UInt64 {
        reads[session, default: Reads()].count += 1
        return reads[session]?.changes ?? 0
    }

    /// The feed reports a change of `session`.
    mutating func changed(_ session: String) {
        reads[session]?.changes += 1
    }

    /// The feed reports that any session may have changed.
    mutating func changedAll() {
        for session in reads.keys { reads[session]?.changes += 1 }
    }

    /// How many changes of `session` were reported while calls of it were in flight (for
    /// tests: `0` once none is).
    func reportedChanges(of session: String) -> UInt64 { reads[session]?.changes ?? 0 }

    /// A read of `session` ends; returns whether a change was reported since it began.
    mutating func end(_ session: String, began: UInt64) -> Bool {
        guard var entry = reads[session] else { return false }
        let changed = entry.changes != began
        entry.count -= 1
        reads[session] = entry.count > 0 ? entry : nil
        return changed
    }
}
