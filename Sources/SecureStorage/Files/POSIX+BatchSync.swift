import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension POSIX {
    /// fsyncs many files at once. Concurrent fsyncs share journal commits on journaling file
    /// systems, so 10,000 small files take about as long as a few hundred sequential ones.
    static func syncFiles(_ paths: [String], lanes: Int = 32) throws {
        guard !paths.isEmpty else { return }
        let failures = FailureBox()
        let laneCount = min(lanes, paths.count)
        DispatchQueue.concurrentPerform(iterations: laneCount) { lane in
            var index = lane
            while index < paths.count {
                do {
                    guard let fd = try openFile(paths[index], O_RDONLY | O_NOFOLLOW) else { return }
                    defer { closeFile(fd) }
                    try syncFile(fd, path: paths[index])
                } catch {
                    failures.record(error)
                    return
                }
                index += laneCount
            }
        }
        if let error = failures.first { throw error }
    }
}

/// The first error seen by concurrent workers.
private final class FailureBox: Sendable {
    private let error = Mutex<(any Error)?>(nil)

    func record(_ error: any Error) {
        self.error.withLock { if $0 == nil { $0 = error } }
    }

    var first: (any Error)? { error.withLock { $0 } }
}
