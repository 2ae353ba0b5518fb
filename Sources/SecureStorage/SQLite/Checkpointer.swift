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
/// checkpoint racing a stream of commits never sees: the frames committed while it copied are
/// still in the WAL when it ends. Passes that chase them cost two syncs each and end behind
/// again; against a writer committing every ~0.3 ms they ran about once per three commits
/// (0.8 extra `fdatasync`s per commit, 25 % of a sequential writer's rate; docs/performance.md).
/// So one background pass copies the bulk and hands the rest to the writer: the writer's next
/// commit copies the few frames committed meanwhile (SQLite resumes from what is already
/// copied) and syncs, and the write after it starts the WAL over. At twice the
/// threshold the writer copies whatever is left in any case (a background pass that keeps
/// failing, or readers that held old snapshots).
final class Checkpointer: Sendable {
    /// SQLite's default automatic-checkpoint threshold, in pages.
    static let threshold = 1000
    /// The WAL size at which the writer copies what the background has not.
    static let writerThreshold = 2 * threshold

    /// Background checkpoint passes completed so far (for tests).
    let backgroundPasses = Atomic<Int>(0)
    /// Checkpoints the writer completed itself (for tests).
    let writerPasses = Atomic<Int>(0)
    /// Set after each background pass: the writer's next commit past the threshold copies what
    /// the pass left. Cleared by any commit below the threshold, since the WAL then started
    /// over and the pass left nothing.
    private let writerFinishes = Atomic<Bool>(false)

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
            guard let self else { return }
            guard pages >= Self.threshold else {
                // A hand-off from a pass that copied everything before the WAL started over is
                // stale: honoured later, it would make the writer copy a whole cycle inline.
                self.writerFinishes.store(false, ordering: .relaxed)
                return
            }
            if pages >= Self.writerThreshold || self.writerFinishes.exchange(false, ordering: .acquiringAndReleasing) {
                // Called by whoever holds the writer, the only user of its connection then.
                if (try? writer.checkpointPassively()) != nil { self.writerPasses.add(1, ordering: .relaxed) }
            } else {
                self.schedule()
            }
        }
    }

    private func schedule() {
        guard !closed.load(ordering: .acquiring), !scheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // Commits made while a pass runs do not queue another: the writer finishes after it.
        queue.async {
            self.checkpoint()
            self.scheduled.store(false, ordering: .releasing)
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
                    try opened.applySetting("PRAGMA synchronous=FULL")
                    connection = opened
                }
                // Commits go on meanwhile, and a pass that ends "complete" has copied only the
                // frames that were there when it began: the writer copies the rest.
                if let connection {
                    _ = try connection.checkpointPassively()
                    writerFinishes.store(true, ordering: .releasing)
                    backgroundPasses.add(1, ordering: .relaxed)
                }
            } catch {
                connection?.close()
                connection = nil
            }
        }
    }

    /// Returns once a background pass queued or running now has ended (for tests).
    func waitForBackgroundPass() {
        queue.sync {}
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
