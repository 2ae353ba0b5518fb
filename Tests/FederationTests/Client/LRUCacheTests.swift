@testable import Federation
import XCTest

/// The client's session cache: least recently used first out, pinned entries kept, and an
/// insertion's cost independent of how many entries are pinned.
final class LRUCacheTests: XCTestCase {
    private let nothingPinned: (String, Int) -> Bool = { _, _ in false }

    func testTheLeastRecentlyUsedEntryGoesFirst() {
        var cache = LRUCache<Int>(capacity: 2)
        XCTAssertTrue(cache.set("a", 1, isPinned: nothingPinned).isEmpty)
        XCTAssertTrue(cache.set("b", 2, isPinned: nothingPinned).isEmpty)
        XCTAssertEqual(cache.get("a"), 1)  // now b is the least recently used
        let evicted = cache.set("c", 3, isPinned: nothingPinned)
        XCTAssertEqual(evicted.map(\.key), ["b"])
        XCTAssertEqual(evicted.map(\.value), [2])
        XCTAssertEqual(Set(cache.keys), ["a", "c"])
        // peek leaves the order alone: a stays the least recently used.
        XCTAssertEqual(cache.peek("a"), 1)
        XCTAssertEqual(cache.set("d", 4, isPinned: nothingPinned).map(\.key), ["a"])
        XCTAssertEqual(cache.remove("c"), 3)
        XCTAssertNil(cache.get("c"))
        XCTAssertEqual(cache.count, 1)
    }

    func testPinnedEntriesAndTheEntryJustSetStay() {
        var cache = LRUCache<Int>(capacity: 1)
        cache.set("observed", 0, isPinned: nothingPinned)
        let pinned: (String, Int) -> Bool = { key, _ in key == "observed" }
        XCTAssertTrue(cache.set("new", 1, isPinned: pinned).isEmpty, "neither the pinned entry nor the one just set goes")
        XCTAssertEqual(cache.count, 2)
        XCTAssertEqual(cache.set("newer", 2, isPinned: pinned).map(\.key), ["new"])
        XCTAssertEqual(Set(cache.keys), ["observed", "newer"])
    }

    /// 2,000 observed sessions, idle, and 4,000 other sessions read one after another through
    /// a cache of 100: each insertion asked about every pinned entry at the end of the list
    /// (over 8 million questions in all); now each asks about a bounded number, and the
    /// unpinned entries still go.
    func testAnInsertionCostsTheSameHoweverManyEntriesArePinned() {
        var cache = LRUCache<Int>(capacity: 100)
        let pinnedCount = 2000
        for number in 0..<pinnedCount { cache.set("observed-\(number)", number, isPinned: { _, _ in true }) }
        var questions = 0
        let observedArePinned: (String, Int) -> Bool = { key, _ in
            questions += 1
            return key.hasPrefix("observed-")
        }
        let insertions = 4000
        var evicted = 0
        for number in 0..<insertions {
            evicted += cache.set("read-\(number)", number, isPinned: observedArePinned).count
        }
        XCTAssertLessThanOrEqual(questions, insertions * (LRUCache<Int>.pinnedPassedPerEviction + 2), "questions asked of isPinned")
        XCTAssertTrue((0..<pinnedCount).allSatisfy { cache.peek("observed-\($0)") == $0 }, "a pinned entry was evicted")
        // Every unpinned entry but those still behind pinned ones has gone.
        XCTAssertGreaterThan(evicted, insertions - pinnedCount / LRUCache<Int>.pinnedPassedPerEviction - 2)
        XCTAssertEqual(cache.count, pinnedCount + insertions - evicted)
        XCTAssertNotNil(cache.peek("read-\(insertions - 1)"), "the entry just set stays")

        // Unpinned, the observed sessions go as later insertions need room.
        for number in 0..<(2 * pinnedCount) { cache.set("later-\(number)", number, isPinned: nothingPinned) }
        XCTAssertEqual(cache.count, 100)
    }
}
