import Synchronization
import XCTest
@testable import SecureStorage

/// The fan-out every engine's change feed shares; the engines' own tests cover their sources.
final class ChangeFanOutTests: XCTestCase {
    /// Counts a source's starts and stops.
    private final class SourceCounter: Sendable {
        private let counts = Mutex((starts: 0, stops: 0))
        var starts: Int { counts.withLock { $0.starts } }
        var stops: Int { counts.withLock { $0.stops } }

        func start() -> ChangeFanOut.StopSource {
            counts.withLock { $0.starts += 1 }
            return { self.counts.withLock { $0.stops += 1 } }
        }
    }

    func testOverflowKeepsTheNewestAndEndsWithAll() async {
        let fanOut = ChangeFanOut(bufferSize: 2)
        let stream = fanOut.subscribe()
        fanOut.deliver([.item("a"), .item("b"), .item("c")])
        fanOut.close()
        let seen = await drain(stream)
        XCTAssertEqual(seen, [.item("c"), .all])
    }

    func testNoExtraAllWhenTheBatchEndsWithAll() async {
        let fanOut = ChangeFanOut(bufferSize: 2)
        let stream = fanOut.subscribe()
        fanOut.deliver([.item("a"), .item("b"), .all])
        fanOut.close()
        let seen = await drain(stream)
        XCTAssertEqual(seen, [.item("b"), .all])
    }

    func testExcludedWriterIsNotDelivered() async {
        let fanOut = ChangeFanOut(bufferSize: 16)
        let excluding = fanOut.subscribe(excludingWriter: 7)
        let everything = fanOut.subscribe()
        fanOut.deliver([(change: .item("mine"), writer: 7), (change: .item("theirs"), writer: 8), (change: .item("other"), writer: nil)])
        fanOut.close()
        let excludingSeen = await drain(excluding)
        let everythingSeen = await drain(everything)
        XCTAssertEqual(excludingSeen, [.item("theirs"), .item("other")])
        XCTAssertEqual(everythingSeen, [.item("mine"), .item("theirs"), .item("other")])
    }

    func testSourceRunsOnlyWhileSubscribed() async {
        let fanOut = ChangeFanOut(bufferSize: 16)
        let counter = SourceCounter()
        let firstStream = fanOut.subscribe(startSource: counter.start)
        let first = Task { await drain(firstStream) }
        let secondStream = fanOut.subscribe(startSource: counter.start)
        let second = Task { await drain(secondStream) }
        XCTAssertEqual(counter.starts, 1, "one source for every subscriber")
        first.cancel()
        _ = await first.value
        XCTAssertEqual(counter.stops, 0, "a subscriber is left")
        second.cancel()
        _ = await second.value
        XCTAssertEqual(counter.stops, 1, "the last subscriber left")
        let thirdStream = fanOut.subscribe(startSource: counter.start)
        let third = Task { await drain(thirdStream) }
        XCTAssertEqual(counter.starts, 2, "a new subscriber restarts it")
        fanOut.close()
        _ = await third.value
        XCTAssertEqual(counter.stops, 2, "close stops it")
    }

    func testCloseFinishesStreamsNowAndLater() async {
        let fanOut = ChangeFanOut(bufferSize: 16)
        let counter = SourceCounter()
        let before = fanOut.subscribe(startSource: counter.start)
        fanOut.close()
        fanOut.close()
        let after = fanOut.subscribe(startSource: counter.start)
        fanOut.deliver([.item("late")])
        let beforeSeen = await drain(before)
        let afterSeen = await drain(after)
        XCTAssertEqual(beforeSeen, [])
        XCTAssertEqual(afterSeen, [])
        XCTAssertEqual(counter.starts, 1, "no source after close")
        XCTAssertEqual(counter.stops, 1)
    }
}

/// Every change `stream` yields until it finishes.
private func drain(_ stream: AsyncStream<KeystoreChange>) async -> [KeystoreChange] {
    var seen: [KeystoreChange] = []
    for await change in stream { seen.append(change) }
    return seen
}
