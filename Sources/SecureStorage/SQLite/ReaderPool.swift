import Dispatch
import Synchronization

/// Read connections, separate from the writer's: in WAL mode a read never waits for a commit.
///
/// A read is one indexed lookup in a database whose pages are normally cached, and an AES-GCM
/// open: microseconds, less than the two thread hand-offs it would take to run it elsewhere
/// (at concurrency 1 those were most of what a durable federation cost beyond its fsync). So
/// a read first runs on the caller's thread, on one of a few connections opened with the
/// keystore (never opened later on the caller's thread, where a file planted at the path
/// could block it) and with no busy timeout: it either answers at once or reports the
/// database busy, which in WAL mode only a crash recovery or an exclusive lock taken by
/// another program causes. Then, and when every inline connection is in use, the read goes
/// to a serial lane off the cooperative pool, whose connection waits up to the busy timeout.
/// A read goes to the lane with the fewest reads waiting; a lane that is already running takes
/// the next read without waking another thread.
final class ReaderPool: Sendable {
    /// One serial queue and the connection only it touches, which is what makes the unchecked
    /// `Sendable` sound.
    private final class Lane: @unchecked Sendable {
        let queue: DispatchQueue
        let waiting = Atomic<Int>(0)
        var connection: SQLiteConnection?

        init(index: Int) {
            queue = DispatchQueue(label: "IdentityBroker.SQLiteKeystore.reader\(index)")
        }
    }

    /// Two lanes: reads are short (one indexed lookup and an AES-GCM open), and a second lane
    /// keeps one slow read (a cold page cache) from holding up the others.
    private static let laneCount = 2
    /// Inline connections: enough for the cooperative pool's threads on a small machine.
    private static let inlineCount = 2
    /// The inline connections not in use, how many are in use, and what ``close()`` waits on
    /// while some are.
    private struct Inline {
        var idle: [SQLiteConnection]
        var inUse = 0
        var closer: DispatchSemaphore?
    }

    private let lanes: [Lane]
    private let inline: Mutex<Inline>
    private let closed = Atomic<Bool>(false)
    /// Whether the database file was replaced or removed: the connections would go on reading
    /// a file nobody else opens.
    private let watch: DatabaseFileWatch
    private let path: String
    private let busyTimeout: Duration

    /// - Parameter watch: the keystore's watch of its database file (default: one of the
    ///   file at `path` now).
    init(path: String, busyTimeout: Duration, watch: DatabaseFileWatch? = nil) throws(KeystoreError) {
        self.path = path
        self.watch = watch ?? DatabaseFileWatch(path: path)
        self.busyTimeout = busyTimeout
        self.lanes = (0..<Self.laneCount).map(Lane.init(index:))
        var inline: [SQLiteConnection] = []
        for _ in 0..<Self.inlineCount { inline.append(try SQLiteConnection(path: path, busyTimeout: .zero)) }
        self.inline = Mutex(Inline(idle: inline))
    }

    func read<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws(KeystoreError) -> T) async throws(KeystoreError) -> T {
        if watch.isReplaced { throw SQLiteConnection.replaced(path, "nothing was read") }
        if let connection = takeInline() {
            let result = Result { () throws(KeystoreError) -> T in try body(connection) }
            handBack(connection)
            if case .failure(let error) = result, error.code == .storeUnavailable {
                // Busy (or closed meanwhile): the lane waits, or says closed.
            } else {
                return try result.get()
            }
        }
        return try await readOnLane(body)
    }

    /// An idle inline connection, counted in use; `nil` when none is idle or the pool closed.
    private func takeInline() -> SQLiteConnection? {
        inline.withLock { inline in
            guard !closed.load(ordering: .acquiring), let connection = inline.idle.popLast() else { return nil }
            inline.inUse += 1
            return connection
        }
    }

    /// Returns an inline connection after its read; once the pool is closed, closes it instead,
    /// and the last one closed lets a waiting ``close()`` return.
    private func handBack(_ connection: SQLiteConnection) {
        let kept = inline.withLock { inline -> Bool in
            guard !closed.load(ordering: .acquiring) else { return false }
            inline.idle.append(connection)
            inline.inUse -= 1
            return true
        }
        if kept { return }
        connection.close()
        // Counted out only once closed, so that `close()` never returns before it is.
        let closer = inline.withLock { inline -> DispatchSemaphore? in
            inline.inUse -= 1
            return inline.inUse == 0 ? inline.closer : nil
        }
        closer?.signal()
    }

    private func readOnLane<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws(KeystoreError) -> T) async throws(KeystoreError) -> T {
        let lane = lanes.min { $0.waiting.load(ordering: .relaxed) < $1.waiting.load(ordering: .relaxed) }!
        lane.waiting.add(1, ordering: .relaxed)
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, KeystoreError>, Never>) in
            lane.queue.async {
                let result = self.run(body, on: lane)
                lane.waiting.subtract(1, ordering: .relaxed)
                continuation.resume(returning: result)
            }
        }
        return try result.get()
    }

    /// Runs on `lane.queue`.
    private func run<T>(_ body: (SQLiteConnection) throws(KeystoreError) -> T, on lane: Lane) -> Result<T, KeystoreError> {
        guard !closed.load(ordering: .acquiring) else {
            return .failure(KeystoreError(.storeUnavailable, "the keystore is closed", path: path))
        }
        do throws(KeystoreError) {
            let connection: SQLiteConnection
            if let open = lane.connection {
                connection = open
            } else {
                connection = try SQLiteConnection(path: path, busyTimeout: busyTimeout)
                lane.connection = connection
            }
            return .success(try body(connection))
        } catch {
            return .failure(error)
        }
    }

    /// Refuses new reads and closes the connections; returns once every one is closed, after
    /// the reads in progress (an inline read's and each lane's; reads queued behind a lane's
    /// fail as closed), as the writer does, so that a closed keystore holds no descriptor of
    /// the database. An inline read is one statement that never waits for a lock (a lookup,
    /// or the key listing's scan), so waiting for it is short; a lane's may take up to the
    /// busy timeout. A second call returns at once, even while the first still waits.
    func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let (idle, closer) = inline.withLock { inline -> ([SQLiteConnection], DispatchSemaphore?) in
            defer { inline.idle.removeAll() }
            if inline.inUse > 0 { inline.closer = DispatchSemaphore(value: 0) }
            return (inline.idle, inline.closer)
        }
        for connection in idle { connection.close() }
        closer?.wait()
        for lane in lanes {
            lane.queue.sync {
                lane.connection?.close()
                lane.connection = nil
            }
        }
    }
}
