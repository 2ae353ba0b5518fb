@testable import PostgresKeystore
import XCTest

/// The pauses of the watch that replaces a pool lagging behind the server's return.
final class PostgresWatchPausesTests: XCTestCase {
    private func take(_ count: Int, from pauses: inout PostgresPool.WatchPauses, failingWith sqlState: String?) -> [Duration] {
        (0..<count).map { _ in
            defer { pauses.failed(sqlState: sqlState) }
            return pauses.take()
        }
    }

    func testAnUnreachableServerIsTriedAtLeastOnceAReconnectDelay() {
        var pauses = PostgresPool.WatchPauses(reconnectDelay: .seconds(1))
        let taken = take(7, from: &pauses, failingWith: nil)
        XCTAssertEqual(taken, [100, 200, 400, 800, 1000, 1000, 1000].map { Duration.milliseconds($0) })
    }

    func testRefusedLoginsAndFullSlotsAreTriedNoMoreThanOnceAMinuteAtLength() {
        for refusal in ["28P01", "28000", "53300"] {
            var pauses = PostgresPool.WatchPauses(reconnectDelay: .seconds(1))
            let taken = take(12, from: &pauses, failingWith: refusal)
            XCTAssertEqual(taken.last, .seconds(60), refusal)
            XCTAssertEqual(Array(taken.prefix(4)), [100, 200, 400, 800].map { Duration.milliseconds($0) }, refusal)
        }
    }

    /// A restart passes through 57P03 (starting up) after the refusals of a server that
    /// was, say, out of slots: the pauses go back to the short ones at once, not after a minute.
    func testAServerStartingUpBringsThePausesBackToTheShortOnes() {
        var pauses = PostgresPool.WatchPauses(reconnectDelay: .seconds(1))
        _ = take(12, from: &pauses, failingWith: "53300")
        XCTAssertEqual(pauses.next, .seconds(60))
        pauses.failed(sqlState: "57P03")
        let taken = take(3, from: &pauses, failingWith: "57P03")
        XCTAssertEqual(taken, [.seconds(1), .seconds(1), .seconds(1)])
        pauses.failed(sqlState: "57P01")
        XCTAssertEqual(pauses.take(), .seconds(1), "a server shutting down is no lasting refusal either")
    }
}
