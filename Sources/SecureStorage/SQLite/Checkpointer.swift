import Dispatch
import Synchronization

/// Checkpoints the writer's WAL into the database on a connection and thread of its own, so
/// commits do not pay for it.
///
/// SQLite's automatic checkpoint runs inside the commit that takes the WAL past 1,000 pages,
/// on the committing thread: at concurrency 1 one federation in about a hundred waited for a
/// thousand page writes and an fsync of the database. Here the writer's WAL hook only asks
/// for a checkpoint, which runs `PASSIVE` (it waits for no reader or writer) while commits go
/// on. Durability is unchanged: commits are durable in the WAL, and a checkpoint syncs the
/// WAL before and the database after copying.
///
/// The WAL file starts over only when a write begins with every frame already copied, which a
/// checkpoint racing a stream of commits rarely sees: measured with fast fsyncs, the WAL grew to
/// 7,000 of 10,000 frames. So at twice the threshold the writer checkpoints too, on its own
/// thread between commits. By then the background has copied most frames, and the writer
/// copies only the rest (SQLite resumes from what is already copied) and syncs: the WAL starts
/// over at the next write, and a commit in a thousand pages waits for a short copy instead of
/// a full one.
final class Checkpointer: Sendable {
    /// SQLite's default automatic-checkpoint threshold, in pages.
    static let threshold = 1000
    /// Passes one checkpoint may take to catch up with commits made while it ran.
    static let catchUpPasses = 4
    /// The WAL size at which the writer copies what the background has not.
    static let writerThreshold = 2 * threshold

    /// Background checkpoint passes run so far (for tests).
    let backgroundPasses = Atomic<Int>(0)

    private let queue = DispatchQueue(label: "IdentityBroker.SQLiteKeystore.checkpoint", qos: .utility)
    private let scheduled = Atomic<Bool>(false)
    private let closed = Atomic<Bool>(false)
    private let connection: Mutex<SQLiteConnection?> = Mutex(nil)
    private let path: String
    private let busyTimeout: Duration

    init(path: String, busyTimeout: Duration) {
        self.path = path
        self.busyTimeout = busyTimeout
    }

    /// Hands the writer's checkpointing to this checkpointer.
    func attach(to writer: SQLiteConnection) throws(KeystoreError) {
        try writer.onCommit { [weak self, unowned writer] pages in
            guard let self, pages >= Self.threshold else { return }
            if pages >= Self.writerThreshold {
                // Called by whoever holds the writer, the only user of its connection then.
                _ = try? writer.checkpointPassively()
            } else {
                self.schedule()
            }
        }
    }

    private func schedule() {
        guard !closed.load(ordering: .acquiring), !scheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        queue.async {
            self.scheduled.store(false, ordering: .releasing)
            self.checkpoint()
        }
    }

    /// Runs on `queue`. A failed checkpoint loses nothing (the frames stay in the WAL) and is
    /// tried again after a later commit.
    private func checkpoint() {
        connection.withLock { connection in
            guard !closed.load(ordering: .acquiring) else { return }
            do throws(KeystoreError) {
                if connection == nil {
                    let opened = try SQLiteConnection(path: path, busyTimeout: busyTimeout)
                    try opened.execute("PRAGMA synchronous=FULL")
                    connection = opened
                }
                // Commits go on meanwhile: a pass that ends behind is followed by a few short
                // ones for the frames written during it, so the WAL is wholly copied at some
                // point between two commits and the next one starts it over, instead of the
                // file growing until the writer's own fallback.
                for _ in 0..<Self.catchUpPasses {
                    guard let connection else { break }
                    backgroundPasses.add(1, ordering: .relaxed)
                    if try connection.checkpointPassively() { break }
                }
            } catch {
                connection?.close()
                connection = nil
            }
        }
    }

    /// Stops scheduling, waits for a running checkpoint and closes the connection.
    func close() {
        closed.store(true, ordering: .releasing)
        connection.withLock { connection in
            connection?.close()
            connection = nil
        }
    }
}
