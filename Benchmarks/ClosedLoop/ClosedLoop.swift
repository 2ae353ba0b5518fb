// The load both in-process benchmarks put on the client they measure: a closed loop of
// `concurrency` callers, as the curl tool's `--parallel-max` runs its transfers.

import Synchronization

/// Runs `body` for every index in `0 ..< count`, from `concurrency` long-lived callers that
/// each claim the next index as soon as their last call returned.
///
/// The callers are long-lived tasks, not a task per call: a child task per call adds its
/// own creation, scheduling and completion to every call, which is the harness's cost, not
/// the measured client's (at concurrency 1 that was two of the six hand-offs to Swift's
/// global executor per federation).
public func forEachIndex(
    count: Int, concurrency: Int, _ body: @escaping @Sendable (Int) async throws -> Void
) async throws {
    let claims = IndexClaims()
    try await withThrowingTaskGroup(of: Void.self) { group in
        for _ in 0..<max(1, min(concurrency, count)) {
            group.addTask {
                while let index = claims.next(below: count) { try await body(index) }
            }
        }
        try await group.waitForAll()
    }
}

/// The next index to run, shared by the callers of ``forEachIndex(count:concurrency:_:)``.
private final class IndexClaims: Sendable {
    private let claimed = Atomic<Int>(0)

    func next(below count: Int) -> Int? {
        let index = claimed.wrappingAdd(1, ordering: .relaxed).oldValue
        return index < count ? index : nil
    }
}
