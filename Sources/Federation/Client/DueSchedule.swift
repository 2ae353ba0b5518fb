#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// When each session next needs attention (its expiry), as a min-heap, so one timer
/// serves any number of sessions: O(log n) to add, O(log n) per session that comes due.
///
/// A session has at most one live entry, its earliest due time: scheduling it again for
/// the same or a later time adds nothing (when the earlier one comes due, the owner looks
/// at the session and schedules what is next), so reads that reschedule cannot grow the
/// heap. Entries are never updated in place; one replaced by an earlier time stays in the
/// heap, stale, and is skipped when it comes due.
struct DueSchedule: Sendable {
    struct Entry: Sendable {
        var due: Date
        var session: String
    }

    private var heap: [Entry] = []
    /// Each scheduled session's live due time.
    private var live: [String: Date] = [:]

    var isEmpty: Bool { heap.isEmpty }
    /// Entries in the heap, stale ones included.
    var count: Int { heap.count }

    /// The earliest due time.
    var next: Date? { heap.first?.due }

    mutating func schedule(_ session: String, at due: Date) {
        if let scheduled = live[session], scheduled <= due { return }
        live[session] = due
        heap.append(Entry(due: due, session: session))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].due < heap[parent].due else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes and returns every live entry due at or before `now`, earliest first.
    mutating func popDue(now: Date) -> [Entry] {
        var due: [Entry] = []
        while let first = heap.first, first.due <= now {
            if live[first.session] == first.due {
                live[first.session] = nil
                due.append(first)
            }
            let last = heap.removeLast()
            guard !heap.isEmpty else { break }
            heap[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1
                let right = left + 1
                var smallest = parent
                if left < heap.count, heap[left].due < heap[smallest].due { smallest = left }
                if right < heap.count, heap[right].due < heap[smallest].due { smallest = right }
                guard smallest != parent else { break }
                heap.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return due
    }

    /// Drops every entry (the owner rebuilds from what it holds).
    mutating func removeAll() {
        heap.removeAll()
        live.removeAll()
    }
}
