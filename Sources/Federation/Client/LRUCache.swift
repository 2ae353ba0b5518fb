/// A bounded map that forgets the least recently used entries first, in O(1) per
/// operation (a dictionary of slots threaded on a doubly linked list).
///
/// Entries the caller pins (a federation in flight, an observed session) are skipped
/// by eviction (and count as used), so the cache may hold more than ``capacity`` while they
/// are pinned, plus, while more than ``pinnedPassedPerEviction`` pinned entries sit at its
/// least recently used end, about one unpinned entry per that many pinned ones, waiting to
/// reach the end; the entry just set is never the one evicted (its caller is about to use it).
struct LRUCache<Value> {
    private struct Slot {
        var key: String
        var value: Value
        var previous: Int?
        var next: Int?
    }

    /// The number of entries kept before the least recently used are dropped.
    let capacity: Int
    private var slots: [Slot?] = []
    private var free: [Int] = []
    private var index: [String: Int] = [:]
    /// Most recently used.
    private var head: Int?
    /// Least recently used.
    private var tail: Int?

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    var count: Int { index.count }
    var keys: Dictionary<String, Int>.Keys { index.keys }

    /// The value for `key`, marking it most recently used.
    mutating func get(_ key: String) -> Value? {
        guard let position = index[key] else { return nil }
        moveToFront(position)
        return slots[position]?.value
    }

    /// The value for `key` without touching its recency.
    func peek(_ key: String) -> Value? {
        index[key].flatMap { slots[$0]?.value }
    }

    /// Changes the value of `key` in place, if present; returns what `body` returns.
    mutating func update<Result>(_ key: String, _ body: (inout Value) -> Result) -> Result? {
        guard let position = index[key], var slot = slots[position] else { return nil }
        let result = body(&slot.value)
        slots[position] = slot
        moveToFront(position)
        return result
    }

    /// Inserts or replaces `key`, then evicts unpinned entries other than `key` beyond
    /// ``capacity``; returns what was evicted.
    @discardableResult
    mutating func set(_ key: String, _ value: Value, isPinned: (String, Value) -> Bool) -> [(key: String, value: Value)] {
        if let position = index[key] {
            slots[position]?.value = value
            moveToFront(position)
        } else {
            let slot = Slot(key: key, value: value, previous: nil, next: head)
            let position: Int
            if let reused = free.popLast() {
                slots[reused] = slot
                position = reused
            } else {
                slots.append(slot)
                position = slots.count - 1
            }
            if let head { slots[head]?.previous = position }
            head = position
            if tail == nil { tail = position }
            index[key] = position
        }
        return evict(keeping: key, isPinned: isPinned)
    }

    /// Removes `key`; returns its value.
    @discardableResult
    mutating func remove(_ key: String) -> Value? {
        guard let position = index.removeValue(forKey: key), let slot = slots[position] else { return nil }
        unlink(position)
        slots[position] = nil
        free.append(position)
        return slot.value
    }

    /// How many pinned entries one eviction passes over before it stops.
    static var pinnedPassedPerEviction: Int { 16 }

    /// Evicts unpinned entries from the least recently used end until the cache is within
    /// ``capacity``. A pinned entry passed over moves to the front, as if used: pinned entries
    /// (observed sessions, idle for hours) would otherwise gather at the end and be walked
    /// past by every later insertion, O(pinned) each. At most ``pinnedPassedPerEviction`` are
    /// passed over per call, so an insertion costs O(1) whatever is pinned; unpinned entries
    /// behind them reach the end as they move and go at later insertions.
    private mutating func evict(keeping kept: String, isPinned: (String, Value) -> Bool) -> [(key: String, value: Value)] {
        var evicted: [(key: String, value: Value)] = []
        var passedOver = 0
        while index.count > capacity, passedOver < Self.pinnedPassedPerEviction, let position = tail, let slot = slots[position] {
            if slot.key == kept {
                moveToFront(position)  // its caller is about to use it; not a pinned entry passed
            } else if !isPinned(slot.key, slot.value), let value = remove(slot.key) {
                evicted.append((slot.key, value))
            } else {
                passedOver += 1
                moveToFront(position)
            }
        }
        return evicted
    }

    private mutating func moveToFront(_ position: Int) {
        guard head != position else { return }
        unlink(position)
        slots[position]?.previous = nil
        slots[position]?.next = head
        if let head { slots[head]?.previous = position }
        head = position
        if tail == nil { tail = position }
    }

    private mutating func unlink(_ position: Int) {
        guard let slot = slots[position] else { return }
        if let previous = slot.previous { slots[previous]?.next = slot.next } else { head = slot.next }
        if let next = slot.next { slots[next]?.previous = slot.previous } else { tail = slot.previous }
        slots[position]?.previous = nil
        slots[position]?.next = nil
    }
}
