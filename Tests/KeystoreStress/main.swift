// keystore-stress: a helper process for SecureStorageTests (the SQLiteKeystore engine).
//
//   keystore-stress sqlite-write ROOT WORKER COUNT
//       writes w<WORKER>-<i> for i < COUNT (one commit each) and "shared" (versioned by i)
//   keystore-stress sqlite-overwrite ROOT KEYS
//       commits batches rewriting k0..k<KEYS-1> to "gen-<n>-<padding>" forever, printing
//       "acked <n>" once batch n's commit returned
//   keystore-stress sqlite-migrate ROOT FROM TO [FSIZE]
//       migrates and prints the moved count, or "error CODE"; with FSIZE, first limits the file
//       size (RLIMIT_FSIZE, SIGXFSZ ignored) so writes past it fail with EFBIG
//   keystore-stress sqlite-migrate-crash ROOT FROM TO
//       migrates and SIGKILLs itself between the copy and the delete transactions
//   keystore-stress sqlite-shared ROOT GROUP KEY
//       in access group GROUP (key file): writes KEY = "from-<uid>", prints every "key=value"
//   keystore-stress sqlite-shm-truncated ROOT GROUP
//       writes k = "before" in GROUP ("none": private), prints "ready", waits for a line on stdin
//       (meanwhile the test truncates the database's -shm file), then reads k, writes and reads
//       k2 = "after", and prints "k=… k2=… repairs=N" (the SIGBUS guard's repairs)
//   keystore-stress sqlite-shm-read ROOT GROUP KEY
//       reads KEY in GROUP as `federate credentials` does (one connection that never writes)
//       and prints "ready", or "error CODE" and exits when the open or read fails; then waits for a
//       line on stdin, reads KEY again and prints "read" or "error CODE"
//   keystore-stress sqlite-shm-lookups ROOT GROUP
//       writes and reads k = "v" in GROUP and prints "ready"; then for each line on stdin but
//       "stop" (meanwhile the test forges the database's wal-index) reads k and prints "read"
//       or "error CODE"; prints "done" at "stop"
//   keystore-stress sqlite-shm-overread ROOT
//       maps a 32 KiB file as SQLite maps a wal-index region, through the guard's mmap, right
//       below inaccessible pages (the worst neighbour a mapping can have), then reads as far
//       past the region's start as SQLite 3.40 may (65,535 page numbers); prints "read N" and
//       exits 0, or dies of the fault
//   keystore-stress sqlite-shm-hammered ROOT GROUP
//       prints "ready", then reads and writes from 4 tasks until a line arrives on stdin
//       (meanwhile the test truncates the database's -shm file again and again); prints
//       "operations=N failures=M repairs=R"
//   keystore-stress sqlite-bus-error ROOT
//       opens a keystore (which installs the SIGBUS guard), then touches a mapping of its own
//       whose file it truncated: a fault the guard must pass on, so the process dies of SIGBUS
//   keystore-stress sqlite-bench ROOT WRITERS COMMITS
//       WRITERS tasks make COMMITS one-item commits in all; prints "commits/s"
//   keystore-stress fdatasync-bench PATH COUNT
//       the floor: COUNT 100-byte appends each followed by fdatasync; prints "syncs/s"
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CSQLite
import CSQLiteGuard
import Dispatch
import SecureStorage
import Synchronization

func printLine(_ text: String) {
    let line = Array((text + "\n").utf8)
    _ = line.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
}

func seconds(since start: timespec) -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec - start.tv_sec) + Double(now.tv_nsec - start.tv_nsec) / 1e9
}

func monotonicNow() -> timespec {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return now
}

/// The SQLite engine's modes; `false` when `mode` is not one of them.
func runSQLite(_ mode: String, _ arguments: [String]) async throws -> Bool {
    switch mode {
    case "sqlite-write":
        guard arguments.count == 5, let worker = Int(arguments[3]), let count = Int(arguments[4]) else { fail("bad arguments") }
        let keystore = try SQLiteKeystore(root: arguments[2], service: "svc")
        defer { keystore.close() }
        for index in 0..<count {
            try await keystore.set(Array("value-\(worker)-\(index)".utf8), forKey: "w\(worker)-\(index)")
            try await keystore.set(Array("worker-\(worker)-\(index)".utf8), forKey: "shared", version: Int64(index))
        }
    case "sqlite-overwrite":
        guard arguments.count == 4, let keys = Int(arguments[3]) else { fail("bad arguments") }
        let keystore = try SQLiteKeystore(root: arguments[2], service: "svc")
        let padding = String(repeating: "x", count: 300)
        var generation = 1
        while true {
            var batch = KeystoreBatch()
            for key in 0..<keys { batch.set(Array("gen-\(generation)-\(padding)".utf8), forKey: "k\(key)") }
            try await keystore.commit(batch)
            // Only once the commit returned: what a kill may not take back.
            printLine("acked \(generation)")
            generation += 1
        }
    case "sqlite-migrate":
        guard arguments.count == 5 || arguments.count == 6 else { fail("bad arguments") }
        if arguments.count == 6, let limit = UInt(arguments[5]) {
            signal(SIGXFSZ, SIG_IGN)
            var rlimitValue = rlimit(rlim_cur: rlim_t(limit), rlim_max: rlim_t(limit))
            guard setrlimit(Int32(RLIMIT_FSIZE.rawValue), &rlimitValue) == 0 else { fail("setrlimit failed") }
        }
        do {
            let moved = try await SQLiteKeystore.migrate(root: arguments[2], service: "svc", from: group(arguments[3]), to: group(arguments[4]))
            printLine("moved \(moved)")
        } catch {
            printLine("error \(error.code) errno \(error.errno.map(String.init) ?? "-"): \(error)")
        }
    case "sqlite-migrate-crash":
        guard arguments.count == 5 else { fail("bad arguments") }
        _ = try await SQLiteKeystore._migrate(root: arguments[2], service: "svc", from: group(arguments[3]), to: group(arguments[4])) { stage in
            if stage == "copied" { kill(getpid(), SIGKILL) }
        }
        fail("the checkpoint was never reached")
    case "sqlite-shared":
        guard arguments.count == 5 else { fail("bad arguments") }
        let keystore = try SQLiteKeystore(root: arguments[2], service: "svc", accessGroup: AccessGroup(name: arguments[3]))
        defer { keystore.close() }
        try await keystore.set(Array("from-\(getuid())".utf8), forKey: arguments[4])
        var lines = ""
        for key in try await keystore.keys() {
            lines += "\(key)=\(String(decoding: try await keystore.requireValue(forKey: key), as: UTF8.self))\n"
        }
        let bytes = Array(lines.utf8)
        _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
    case "sqlite-shm-truncated":
        guard arguments.count == 4 else { fail("bad arguments") }
        let keystore = try SQLiteKeystore(root: arguments[2], service: "svc", accessGroup: group(arguments[3]))
        defer { keystore.close() }
        try await keystore.set(Array("before".utf8), forKey: "k")
        printLine("ready")
        guard readLine() != nil else { fail("no go-ahead on stdin") }
        let before = String(decoding: try await keystore.requireValue(forKey: "k"), as: UTF8.self)
        try await keystore.set(Array("after".utf8), forKey: "k2")
        let after = String(decoding: try await keystore.requireValue(forKey: "k2"), as: UTF8.self)
        printLine("k=\(before) k2=\(after) repairs=\(ib_sqlite3_shm_guard_repairs())")
    case "sqlite-shm-read":
        guard arguments.count == 5 else { fail("bad arguments") }
        let reader: SQLiteKeystore.SingleReader
        do {
            guard let opened = try SQLiteKeystore.SingleReader.open(root: arguments[2], service: "svc", accessGroup: group(arguments[3])) else {
                fail("the namespace needs a full open first")
            }
            reader = opened
            _ = try reader.value(forKey: arguments[4])
        } catch {
            printLine("error \(error.code)")
            return true
        }
        defer { reader.close() }
        printLine("ready")
        guard readLine() != nil else { fail("no go-ahead on stdin") }
        do {
            _ = try reader.value(forKey: arguments[4])
            printLine("read")
        } catch {
            printLine("error \(error.code)")
        }
    case "sqlite-shm-lookups":
        guard arguments.count == 4 else { fail("bad arguments") }
        let keystore = try SQLiteKeystore(root: arguments[2], service: "svc", accessGroup: group(arguments[3]))
        defer { keystore.close() }
        try await keystore.set(Array("v".utf8), forKey: "k")
        _ = try await keystore.value(forKey: "k")
        printLine("ready")
        while let line = readLine(), line != "stop" {
            do {
                _ = try await keystore.value(forKey: "k")
                printLine("read")
            } catch {
                printLine("error \(error.code)")
            }
        }
        printLine("done")
    case "sqlite-shm-overread":
        guard arguments.count == 3 else { fail("bad arguments") }
        printLine("read \(try readPastAWalIndexRegion(in: arguments[2]))")
    case "sqlite-shm-hammered":
        guard arguments.count == 4 else { fail("bad arguments") }
        let keystore = try SQLiteKeystore(root: arguments[2], service: "svc", accessGroup: group(arguments[3]))
        defer { keystore.close() }
        try await keystore.set(Array("v".utf8), forKey: "k")
        let stop = Flag()
        // A thread of its own blocks on stdin, not one of the tasks' cooperative threads.
        DispatchQueue.global().async { _ = readLine(); stop.set() }
        printLine("ready")
        let counts = await withTaskGroup(of: (Int, Int).self) { tasks in
            for worker in 0..<4 {
                tasks.addTask {
                    var operations = 0, failures = 0
                    while !stop.isSet {
                        do {
                            if operations % 2 == 0 {
                                _ = try await keystore.value(forKey: "k")
                            } else {
                                try await keystore.set(Array("w\(worker)-\(operations)".utf8), forKey: "w\(worker)")
                            }
                        } catch {
                            failures += 1
                        }
                        operations += 1
                    }
                    return (operations, failures)
                }
            }
            return await tasks.reduce((0, 0)) { ($0.0 + $1.0, $0.1 + $1.1) }
        }
        printLine("operations=\(counts.0) failures=\(counts.1) repairs=\(ib_sqlite3_shm_guard_repairs())")
    case "sqlite-bus-error":
        guard arguments.count == 3 else { fail("bad arguments") }
        let keystore = try SQLiteKeystore(root: arguments[2], service: "svc")
        try await keystore.set(Array("v".utf8), forKey: "k")
        let path = arguments[2] + "/not-sqlite"
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0, ftruncate(descriptor, 4096) == 0 else { fail("cannot make \(path)") }
        guard let mapping = mmap(nil, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0), mapping != MAP_FAILED else { fail("mmap") }
        guard ftruncate(descriptor, 0) == 0 else { fail("ftruncate") }
        printLine("touching")
        mapping.storeBytes(of: 1, as: UInt8.self)
        printLine("survived")
    case "sqlite-bench":
        guard arguments.count == 5, let writers = Int(arguments[3]), let commits = Int(arguments[4]) else { fail("bad arguments") }
        let keystore = try SQLiteKeystore(root: arguments[2], service: "svc")
        defer { keystore.close() }
        let value = [UInt8](repeating: 0x5A, count: 1300)
        let start = monotonicNow()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    for index in stride(from: writer, to: commits, by: writers) {
                        try await keystore.set(value, forKey: "bench-\(index)")
                    }
                }
            }
            try await group.waitForAll()
        }
        printLine("\(Int(Double(commits) / seconds(since: start))) commits/s")
    case "fdatasync-bench":
        guard arguments.count == 4, let count = Int(arguments[3]) else { fail("bad arguments") }
        let fd = open(arguments[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { fail("open failed") }
        defer { close(fd) }
        let record = [UInt8](repeating: 0x5A, count: 100)
        let start = monotonicNow()
        for _ in 0..<count {
            _ = record.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard fdatasync(fd) == 0 else { fail("fdatasync failed") }
        }
        printLine("\(Int(Double(count) / seconds(since: start))) syncs/s")
    default:
        return false
    }
    return true
}

/// Set once, read from any task or thread.
final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}

func fail(_ message: String) -> Never {
    let line = Array("keystore-stress: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(2)
}

func group(_ text: String) -> AccessGroup {
    text == "none" ? .none : AccessGroup(name: text)
}

let arguments = CommandLine.arguments
guard arguments.count >= 2 else { fail("usage: keystore-stress sqlite-write|sqlite-overwrite|sqlite-migrate|… ARGUMENTS") }

do {
    guard try await runSQLite(arguments[1], arguments) else { fail("unknown mode \(arguments[1])") }
} catch {
    fail("\(error)")
}

/// Maps a 32 KiB file through the guard's `mmap` (SQLite's `unix` VFS system call, as SQLite
/// maps a wal-index region) at an address right below inaccessible pages, and reads every
/// page up to 136 + 65,535 × 4 bytes past the mapping's start: how far SQLite 3.40 reads
/// when a forged hash slot points past the region's page numbers. Returns how many pages it
/// read; a fault ends the process.
func readPastAWalIndexRegion(in directory: String) throws -> Int {
    struct Failed: Error { let step: String }
    guard ib_sqlite3_shm_guard_install() == 0, let vfs = sqlite3_vfs_find("unix"),
          let syscall = vfs.pointee.xGetSystemCall(vfs, "mmap")
    else { throw Failed(step: "the guard") }
    typealias Mmap = @convention(c) (UnsafeMutableRawPointer?, Int, Int32, Int32, Int32, off_t) -> UnsafeMutableRawPointer?
    let guardedMmap = unsafeBitCast(syscall, to: Mmap.self)
    let region = 32_768, farthest = 136 + 65_535 * 4
    let descriptor = open(directory + "/region-shm", O_RDWR | O_CREAT | O_EXCL, 0o600)
    guard descriptor >= 0, ftruncate(descriptor, off_t(region)) == 0 else { throw Failed(step: "the file") }
    // Inaccessible pages with a free megabyte below them, so that a mapping placed at the hint
    // ends right where they start.
    let fenceLength = 512 * 1024, room = 1024 * 1024
    guard let area = mmap(nil, room + fenceLength, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), area != MAP_FAILED,
          munmap(area, room) == 0
    else { throw Failed(step: "the fence") }
    let fence = area + room
    guard let mapped = guardedMmap(fence - region, region, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0),
          mapped != MAP_FAILED
    else { throw Failed(step: "the mapping") }
    var pages = 0
    var sum: UInt8 = 0
    for offset in stride(from: 0, through: farthest, by: 4096) {
        sum &+= mapped.load(fromByteOffset: offset, as: UInt8.self)
        pages += 1
    }
    sum &+= mapped.load(fromByteOffset: farthest, as: UInt8.self)
    return sum == 0 ? pages : -pages
}
