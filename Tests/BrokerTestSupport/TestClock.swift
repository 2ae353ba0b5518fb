package import Foundation
import Synchronization

/// A wall clock the test moves by hand, for the `now:` a client or server is given.
package final class TestClock: Sendable {
    private let date: Mutex<Date>

    package init(_ start: Date) { date = Mutex(start) }

    package var now: Date { date.withLock { $0 } }
    package var function: @Sendable () -> Date { { [self] in now } }

    package func set(_ value: Date) { date.withLock { $0 = value } }
    package func advance(by seconds: TimeInterval) { date.withLock { $0 = $0.addingTimeInterval(seconds) } }
}
