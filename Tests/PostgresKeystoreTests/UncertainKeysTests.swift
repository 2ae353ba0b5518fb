@testable import PostgresKeystore
import XCTest

/// The keys whose commit's outcome is unknown, which this instance's own notifications are
/// checked against (its own commits are otherwise left out of its feed).
final class UncertainKeysTests: XCTestCase {
    func testKeysAreFollowedUntilTheirWindowEnds() async throws {
        var keys = PostgresChangeFeed.UncertainKeys()
        keys.add(["a", "b"], until: .now + .seconds(2))
        XCTAssertEqual(keys.current(among: ["a", "c", "a"]), ["a"])
        try await Task.sleep(for: .milliseconds(2100))
        XCTAssertEqual(keys.current(among: ["a"]), [])

        // A window shorter than the sweep's second ends on time too, not at the next sweep
        // (due a second after the set was made: a late check only lets the sweep agree).
        var short = PostgresChangeFeed.UncertainKeys()
        short.add(["s"], until: .now + .milliseconds(300))
        try await Task.sleep(for: .milliseconds(500))
        XCTAssertEqual(short.current(among: ["s"]), [], "followed past its window")
    }

    /// Past the limit (a long outage of a busy instance) keys are left out: until their window
    /// ends, every key an own notification names may be one, so none is skipped.
    func testKeysLeftOutForWantOfRoomAreNotSkipped() async throws {
        var keys = PostgresChangeFeed.UncertainKeys()
        keys.add((0..<PostgresChangeFeed.UncertainKeys.limit).map { "k\($0)" }, until: .now + .seconds(60))
        keys.add(["left-out"], until: .now + .seconds(2))
        XCTAssertTrue(keys.isFull)
        XCTAssertEqual(keys.current(among: ["left-out", "left-out"]), ["left-out"], "a key left out was skipped")
        try await Task.sleep(for: .milliseconds(2100))  // its window ends, and a sweep is due
        XCTAssertEqual(keys.current(among: ["left-out"]), [])
        XCTAssertFalse(keys.isFull)
        XCTAssertEqual(keys.current(among: ["k1"]), ["k1"])
    }
}
