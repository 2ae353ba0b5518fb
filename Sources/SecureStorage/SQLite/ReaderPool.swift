import Dispatch
import Synchronization

/// Read connections, separate from the writer's: in WAL mode a read never waits for a commit.
///
/// Reads run on a concurrent dispatch queue, never on Swift's cooperative pool; each borrows an
/// idle connection (or opens one) for its duration, and a few idle ones are kept.
final class ReaderPool: Sendable {
    private struct State: Sendable {
        var idle: [SQLiteConnection] = []
        var closed = false
    }

    private static let maximumIdle = 4
    private let queue = DispatchQueue(label: "IdentityBroker.SQLiteKeystore.readers", attributes: .concurrent)
    private let state = Mutex(State())
    private let path: String
    private let busyTimeout: Duration

    init(path: String, busyTimeout: Duration) {
        self.path = path
        self.busyTimeout = busyTimeout
    }

    func read<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws(KeystoreError) -> T) async throws(KeystoreError) -> T {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, KeystoreError>, Never>) in
            queue.async {
                continuation.resume(returning: self.run(body))
            }
        }
        return try result.get()
    }

    private func run<T>(_ body: (SQLiteConnection) throws(KeystoreError) -> T) -> Result<T, KeystoreError> {
        let borrowed = state.withLock { state -> (SQLiteConnection?, Bool) in
            (state.closed ? nil : state.idle.popLast(), state.closed)
        }
        if borrowed.1 { return .failure(KeystoreError(.storeUnavailable, "the keystore is closed", path: path)) }
        let connection: SQLiteConnection
        if let reused = borrowed.0 {
            connection = reused
        } else {
            do {
                connection = try SQLiteConnection(path: path, busyTimeout: busyTimeout)
            } catch {
                return .failure(error)
            }
        }
        let result: Result<T, KeystoreError>
        do {
            result = .success(try body(connection))
        } catch {
            result = .failure(error)
        }
        let keep = state.withLock { state -> Bool in
            guard !state.closed, state.idle.count < Self.maximumIdle else { return false }
            state.idle.append(connection)
            return true
        }
        if !keep { connection.close() }
        return result
    }

    /// Closes the idle connections; readers still running close theirs when they finish.
    func close() {
        let idle = state.withLock { state -> [SQLiteConnection] in
            state.closed = true
            defer { state.idle.removeAll() }
            return state.idle
        }
        for connection in idle { connection.close() }
    }
}
