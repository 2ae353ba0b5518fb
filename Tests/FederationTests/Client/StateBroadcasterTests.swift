@testable import Federation
import Foundation
import InMemoryLogging
import Logging
import XCTest

/// The fan-out of session events: what a consumer of every session that falls behind keeps,
/// and that it is told of once.
final class StateBroadcasterTests: XCTestCase {
    /// Past the buffer, the oldest events go: the newest are kept and one warning (not one per
    /// dropped event) says so; a second stream that falls behind is warned of on its own.
    func testAnObserverOfEverySessionThatFallsBehindKeepsTheNewestAndIsWarnedOnce() async throws {
        let logs = InMemoryLogHandler()
        let broadcaster = StateBroadcaster(logger: Logger(label: "broadcaster", factory: { _ in logs }))
        let size = FederationClient.allStateUpdatesBufferSize
        let behind = broadcaster.streamForAll()
        for index in 0..<(size + 50) { broadcaster.publish(.expired, session: "s\(index)") }
        let warnings = { logs.entries.filter { $0.level == .warning && $0.message.description.contains("fell \(size) events behind") } }
        XCTAssertEqual(warnings().count, 1, "\(logs.entries.map(\.message))")

        let second = broadcaster.streamForAll()
        for index in 0..<(size + 1) { broadcaster.publish(.federated, session: "t\(index)") }
        XCTAssertEqual(warnings().count, 2, "the second stream's first drop is told too: \(logs.entries.map(\.message))")
        broadcaster.finishAll()

        var received: [SessionEvent] = []
        for await event in behind { received.append(event) }
        XCTAssertEqual(received.count, size)
        XCTAssertEqual(received.last, SessionEvent(session: "t\(size)", state: .federated), "the newest is kept")
        var secondReceived = 0
        for await _ in second { secondReceived += 1 }
        XCTAssertEqual(secondReceived, size)
    }
}
