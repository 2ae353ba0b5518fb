import CProcessSpawn
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The records `federate exec`'s signal handler writes for its relay (`SignalRelay`). The
/// relay skips a terminal's Ctrl-C the command got itself, and only the record's third field
/// tells it that one from just before the command started never reached the command.
final class SignalRelayRecordTests: XCTestCase {
    func testEachRecordSaysWhetherTheCommandHadStarted() throws {
        var ends: [Int32] = [-1, -1]
        XCTAssertEqual(pipe(&ends), 0)
        defer { for end in ends { close(end) } }
        _ = fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK)
        let signals = [SIGUSR2]
        // Marked started by an earlier relay: a new one starts unmarked.
        ib_signal_relay_command_started()
        XCTAssertEqual(ib_signal_relay_install(ends[1], signals, Int32(signals.count)), 0)
        defer { ib_signal_relay_uninstall(signals, Int32(signals.count)) }

        XCTAssertEqual(raise(SIGUSR2), 0)
        XCTAssertEqual(try Self.record(from: ends[0]).map { [$0[0], $0[2]] }, [SIGUSR2, 0], "before the command started")
        ib_signal_relay_command_started()
        XCTAssertEqual(kill(getpid(), SIGUSR2), 0)
        let after = try Self.record(from: ends[0])
        XCTAssertEqual(after.map { [$0[0], $0[2]] }, [SIGUSR2, 1], "after the command started")
        XCTAssertEqual(after?[1], Int32(SI_USER), "kill(2)'s si_code")
    }

    /// One record (three `Int32`s), waiting up to 5 s for it.
    private static func record(from descriptor: Int32) throws -> [Int32]? {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 5_000) == 1 else { return nil }
        var fields = [Int32](repeating: -1, count: 3)
        let count = fields.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        return count == 12 ? fields : nil
    }
}
