import BrokerTestSupport
import Foundation
import XCTest
@testable import SecureStorage

/// The SQLite engine under several processes, kill -9, a full disk and two Unix users, through
/// the `keystore-stress` helper.
final class SQLiteMultiProcessTests: XCTestCase {
    private let team = AccessGroup(name: "team")

    private func helper(_ arguments: [String], output: Pipe? = nil) throws -> Process {
        let process = Process()
        process.executableURL = try stressExecutable()
        process.arguments = arguments
        if let output { process.standardOutput = output }
        try process.run()
        return process
    }

    private func runHelper(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let output = Pipe()
        let process = try helper(arguments, output: output)
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    private func contents(_ root: String, group: AccessGroup = .none) async throws -> [String: String] {
        let keystore = try SQLiteKeystore(root: root, service: "svc", accessGroup: group)
        defer { keystore.close() }
        var result: [String: String] = [:]
        for key in try await keystore.keys() { result[key] = string(try await keystore.requireValue(forKey: key)) }
        return result
    }

    func testConcurrentWritersInSeveralProcessesLoseAndDuplicateNothing() async throws {
        let temporary = try TemporaryRoot()
        let workers = 4
        let count = 40
        let processes = try (0..<workers).map { try helper(["sqlite-write", temporary.root, "\($0)", "\(count)"]) }
        for process in processes {
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0)
        }
        let items = try await contents(temporary.root)
        XCTAssertEqual(items.count, workers * count + 1)
        for worker in 0..<workers {
            for index in 0..<count { XCTAssertEqual(items["w\(worker)-\(index)"], "value-\(worker)-\(index)") }
        }
        // The versioned "shared" item converged on a last write (version count - 1).
        XCTAssertTrue(items["shared"]?.hasSuffix("-\(count - 1)") ?? false, items["shared"] ?? "nil")
    }

    /// SQLite maps each database's `-shm` file into every process that has the database open,
    /// and a member of a shared group may write that file: one who truncated it ended those
    /// processes with SIGBUS at their next access, private sessions and all. The guard grows
    /// the file back under the fault; the process goes on, and reads and writes work.
    func testATruncatedShmFileEndsNoProcess() throws {
        for group in ["none", "team"] {
            let temporary = try TemporaryRoot()
            let (helper, shm) = try readyHelper("sqlite-shm-truncated", root: temporary.root, group: group)
            if let shm { XCTAssertEqual(truncate(shm, 0), 0, shm) }
            helper.tell("go")
            let (end, rest) = helper.finish()
            XCTAssertEqual(end, "exit 0", group)
            XCTAssertTrue(rest.hasPrefix("k=before k2=after repairs="), "\(group): \(rest)")
            XCTAssertGreaterThan(Int(rest.split(separator: "=").last?.trimmingCharacters(in: .newlines) ?? "") ?? 0, 0, "no fault was repaired: \(rest)")
        }
    }

    /// Truncated again and again (every 200 µs for a second) while four tasks read and write:
    /// several threads fault at once, and each finds the file cut short again. Operations may
    /// fail (the wal-index is lost each time), the process must not end.
    func testAShmFileTruncatedAgainAndAgainEndsNoProcess() throws {
        let temporary = try TemporaryRoot()
        let helper = try Conversation(["sqlite-shm-hammered", temporary.root, "team"])
        XCTAssertEqual(helper.nextOutput(), "ready\n")
        let shm = Self.shmFiles(under: temporary.root)
        XCTAssertEqual(shm.count, 1, "\(shm)")
        let deadline = Date().addingTimeInterval(1)
        var truncations = 0
        while Date() < deadline, helper.process.isRunning {
            for path in shm where truncate(path, 0) == 0 { truncations += 1 }
            usleep(200)
        }
        helper.tell("stop")
        let (end, result) = helper.finish()
        XCTAssertEqual(end, "exit 0", "after \(truncations) truncations: \(result)")
        let fields = Dictionary(uniqueKeysWithValues: result.trimmingCharacters(in: .newlines).split(separator: " ").compactMap { field -> (String, Int)? in
            let parts = field.split(separator: "=")
            guard parts.count == 2, let value = Int(parts[1]) else { return nil }
            return (String(parts[0]), value)
        })
        XCTAssertGreaterThan(fields["repairs"] ?? 0, 1, "\(truncations) truncations: \(result)")
        XCTAssertGreaterThan(fields["operations"] ?? 0, 0, result)
    }

    /// A member of the group writes the database's wal-index: a header with a valid checksum
    /// that claims 65,535 frames, and a hash slot for page 1 pointing past the region's 4,096
    /// page numbers. SQLite 3.40 (Debian 12's) reads that far without a check, past the
    /// 32 KiB mapping, and such a read ended the process (SIGBUS or SIGSEGV, where no page
    /// was mapped). The guard maps zero pages after every wal-index region: the process goes
    /// on, and each read either succeeds or fails with a typed error.
    func testAForgedWalIndexThatSendsLookupsPastTheirRegionEndsNoProcess() throws {
        for group in ["team", "none"] {
            let temporary = try TemporaryRoot()
            let (helper, found) = try readyHelper("sqlite-shm-lookups", root: temporary.root, group: group)
            guard let shm = found else { continue }
            var outcomes: [String] = []
            // Slot values spread over every distance SQLite 3.40 reads: from just past the
            // region's page numbers to 65,535 × 4 bytes on.
            for (round, slot) in [4_100, 6_000, 8_192, 9_000, 11_231, 12_000, 16_384, 20_000, 24_576, 32_768, 40_000, 49_152, 57_344, 65_535].enumerated() {
                try Self.forgeWalIndex(shm, pageOneSlot: UInt16(slot), change: UInt32(round + 1))
                helper.tell("read")
                let outcome = helper.nextOutput()
                outcomes.append("\(slot): \(outcome.trimmingCharacters(in: .newlines))")
                if !(outcome == "read\n" || outcome.hasPrefix("error ")) { break }
            }
            helper.tell("stop")
            let (end, rest) = helper.finish()
            XCTAssertEqual(end, "exit 0", "\(group): \(outcomes) \(rest)")
            XCTAssertEqual(rest, "done\n", "\(group): \(outcomes)")
            XCTAssertEqual(outcomes.count, 14, "\(group): \(outcomes)")
        }
    }

    /// Whatever lies right after a wal-index region's mapping (here, inaccessible pages), a
    /// read as far past the region's start as SQLite 3.40 may go finds zeros: the guard maps
    /// each region at the start of a reservation that long. Without it, such a read ended the
    /// process wherever the next page was not mapped (a SIGBUS on the vvar page in one
    /// reviewer's run).
    func testReadsPastAWalIndexRegionFindZerosWhateverFollowsIt() throws {
        let temporary = try TemporaryRoot()
        let (status, output) = try runHelper(["sqlite-shm-overread", temporary.path])
        XCTAssertEqual(status, 0, output)
        XCTAssertEqual(output, "read \((136 + 65_535 * 4) / 4096 + 1)\n", "every page read, and every byte read zero")
    }

    /// Rewrites both copies of the wal-index header at `path` (native byte order, as SQLite
    /// keeps it) to claim 65,535 frames, with `change` added to its change counter so that
    /// readers drop their page caches, and a valid checksum; grows the file to the 17 regions
    /// that many frames need; and sets page 1's hash slot (383) of the first region to `slot`.
    private static func forgeWalIndex(_ path: String, pageOneSlot slot: UInt16, change: UInt32) throws {
        let descriptor = open(path, O_RDWR)
        guard descriptor >= 0 else { throw POSIXError(.EIO) }
        defer { close(descriptor) }
        var header = [UInt8](repeating: 0, count: 48)
        guard pread(descriptor, &header, 48, 0) == 48 else { throw POSIXError(.EIO) }
        func word(_ offset: Int) -> UInt32 { header[offset..<offset + 4].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) } }
        func setWord(_ offset: Int, _ value: UInt32) { withUnsafeBytes(of: value) { header.replaceSubrange(offset..<offset + 4, with: $0) } }
        setWord(8, word(8) &+ change)  // iChange
        header[12] = 1  // isInit
        setWord(16, 65_535)  // mxFrame
        // SQLite's checksum of the first 40 bytes, in native order: pairs of words.
        var s1: UInt32 = 0, s2: UInt32 = 0
        for pair in stride(from: 0, to: 40, by: 8) {
            s1 = s1 &+ word(pair) &+ s2
            s2 = s2 &+ word(pair + 4) &+ s1
        }
        setWord(40, s1)
        setWord(44, s2)
        guard ftruncate(descriptor, 17 * 32_768) == 0,
              pwrite(descriptor, header, 48, 0) == 48, pwrite(descriptor, header, 48, 48) == 48
        else { throw POSIXError(.EIO) }
        // The first region: the 136-byte header, 4,062 page numbers, then the hash slots.
        var value = slot
        guard pwrite(descriptor, &value, 2, off_t(136 + 4_062 * 4 + 383 * 2)) == 2 else { throw POSIXError(.EIO) }
    }

    /// A helper in `mode` on a keystore of `group` under `root`, once it printed "ready", and
    /// the `-shm` file of the one database it has open (`nil`, and a failure, when there is
    /// not exactly one).
    private func readyHelper(_ mode: String, root: String, group: String) throws -> (Conversation, shm: String?) {
        let helper = try Conversation([mode, root, group])
        XCTAssertEqual(helper.nextOutput(), "ready\n", group)
        let files = Self.shmFiles(under: root)
        XCTAssertEqual(files.count, 1, "one database open in \(group): \(files)")
        return (helper, files.count == 1 ? files[0] : nil)
    }

    /// The `-shm` files under `root`: those of the databases a helper has open.
    private static func shmFiles(under root: String) -> [String] {
        (FileManager.default.enumerator(atPath: root)?.compactMap { $0 as? String }.filter { $0.hasSuffix("-shm") } ?? [])
            .map { root + "/" + $0 }
    }

    /// A fault the guard did not cause to happen (a mapping that is not SQLite's) goes on to
    /// the handler that was there before: the Swift runtime's crash report, or the default
    /// action. Never swallowed, never repeated forever.
    func testABusErrorElsewhereStillEndsTheProcess() throws {
        for backtrace in ["enable=no", "enable=yes,interactive=no,symbolicate=off"] {
            let temporary = try TemporaryRoot()
            let printedPath = temporary.path + "/stdout", reportPath = temporary.path + "/stderr"
            let (status, printed, report) = try Self.runInOwnGroup(
                [try stressExecutable().path, "sqlite-bus-error", temporary.root], environment: ["SWIFT_BACKTRACE=" + backtrace],
                stdout: printedPath, stderr: reportPath, limit: 60)
            XCTAssertEqual(printed, "touching\n", backtrace)
            XCTAssertEqual(status.signal, SIGBUS, "\(backtrace): ended with \(status) (nil: still running after 60 s, so killed): \(report)")
            if backtrace.hasPrefix("enable=yes") {
                XCTAssertTrue(report.contains("Program crashed: Bus error"), "the runtime's crash report did not run: \(report)")
            }
        }
    }

    /// Runs `arguments` as the leader of a process group of its own, with output to files, for
    /// at most `limit` seconds; then kills the whole group. A crash reporter the process
    /// started may outlive it, and Foundation's `Process` waits for such a grandchild too.
    private static func runInOwnGroup(
        _ arguments: [String], environment: [String], stdout: String, stderr: String, limit: Double
    ) throws -> (status: (signal: Int32?, exit: Int32?), stdout: String, stderr: String) {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))
        let argv = arguments.map { strdup($0) } + [nil], envp = environment.map { strdup($0) } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var pid = pid_t()
        let code = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, envp)
        guard code == 0 else { throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO) }
        defer { kill(-pid, SIGKILL) }
        var status: Int32 = 0
        let deadline = Date().addingTimeInterval(limit)
        while waitpid(pid, &status, WNOHANG) == 0 {
            guard Date() < deadline else {
                kill(-pid, SIGKILL)
                waitpid(pid, &status, 0)
                return ((nil, nil), (try? String(contentsOfFile: stdout, encoding: .utf8)) ?? "", (try? String(contentsOfFile: stderr, encoding: .utf8)) ?? "")
            }
            usleep(20_000)
        }
        let signal = status & 0x7F
        return ((signal == 0 ? nil : signal, signal == 0 ? (status >> 8) & 0xFF : nil),
                (try? String(contentsOfFile: stdout, encoding: .utf8)) ?? "", (try? String(contentsOfFile: stderr, encoding: .utf8)) ?? "")
    }

    func testKillNineDuringWritesLeavesWholeBatches() async throws {
        let temporary = try TemporaryRoot()
        let keys = 5
        for round in 0..<5 {
            let output = Pipe()
            let process = try helper(["sqlite-overwrite", temporary.root, "\(keys)"], output: output)
            // "acked N" comes once batch N's commit returned; the first, so every round has
            // one to find.
            let first = output.fileHandleForReading.readData(ofLength: 8)
            XCTAssertEqual(String(decoding: first, as: UTF8.self), "acked 1\n", "round \(round): the helper failed before its first commit")
            usleep(UInt32.random(in: 0...80_000))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            XCTAssertEqual(process.terminationReason, .uncaughtSignal, "round \(round)")
            let rest = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            let acked = rest.split(separator: "\n").compactMap { Int($0.dropFirst("acked ".count)) }.last ?? 1
            let items = try await contents(temporary.root)
            // Each batch rewrote every key: all keys are there and carry one generation, never a mix.
            XCTAssertEqual(items.count, keys, "round \(round): \(items.keys.sorted())")
            let generations = Set(items.values.map { $0.split(separator: "-")[1] })
            XCTAssertEqual(generations.count, 1, "round \(round): \(generations)")
            // Nothing acknowledged was lost: the last acknowledged batch, or the one after it
            // (committed, killed before it said so).
            let found = generations.first.flatMap { Int($0) }
            XCTAssertTrue(found == acked || found == acked + 1, "round \(round): generation \(found.map(String.init) ?? "none") found, \(acked) acknowledged")
            XCTAssertTrue(items.values.allSatisfy { $0.hasPrefix("gen-") && $0.hasSuffix(String(repeating: "x", count: 300)) }, "round \(round)")
        }
    }

    func testKillNineBetweenTheMigrationTransactionsIsCompletedByARerun() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "svc")
        var batch = KeystoreBatch()
        for index in 0..<20 { batch.set(bytes("value-\(index)"), forKey: "k\(index)") }
        try await keystore.commit(batch)
        keystore.close()

        let crashed = try helper(["sqlite-migrate-crash", temporary.root, "none", "team"])
        crashed.waitUntilExit()
        XCTAssertEqual(crashed.terminationReason, .uncaughtSignal)
        let sourceAfterCrash = try await contents(temporary.root)
        let targetAfterCrash = try await contents(temporary.root, group: team)
        XCTAssertEqual(sourceAfterCrash.count, 20)
        XCTAssertEqual(targetAfterCrash, sourceAfterCrash)

        // A rerun with the wrong source key (the private key file replaced) deletes nothing.
        let keyPath = try StoreLayout(root: temporary.root, service: "svc").keyFilePath(.none)
        let rightKey = try XCTUnwrap(FileManager.default.contents(atPath: keyPath))
        try Data((0..<32).map { _ in UInt8.random(in: 0...255) }).write(to: URL(fileURLWithPath: keyPath))
        XCTAssertEqual(chmod(keyPath, 0o600), 0)
        let wrong = try runHelper(["sqlite-migrate", temporary.root, "none", "team"])
        XCTAssertTrue(wrong.output.hasPrefix("error invalidKey"), "the source's key check refuses it: \(wrong.output)")
        try rightKey.write(to: URL(fileURLWithPath: keyPath))
        XCTAssertEqual(chmod(keyPath, 0o600), 0)
        let sourceAfterWrongKey = try await contents(temporary.root)
        XCTAssertEqual(sourceAfterWrongKey.count, 20)

        let rerun = try runHelper(["sqlite-migrate", temporary.root, "none", "team"])
        XCTAssertEqual(rerun.output, "moved 20\n")
        let source = try await contents(temporary.root)
        let target = try await contents(temporary.root, group: team)
        XCTAssertTrue(source.isEmpty)
        XCTAssertEqual(target.count, 20)
        XCTAssertEqual(target["k7"], "value-7")
    }

    func testAFullDiskDuringMigrationFailsTypedAndKeepsTheSource() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "svc")
        var batch = KeystoreBatch()
        let padding = String(repeating: "p", count: 2000)
        for index in 0..<200 { batch.set(bytes("value-\(index)-\(padding)"), forKey: "k\(index)") }
        try await keystore.commit(batch)
        keystore.close()

        // 128 KiB: the target's schema fits, its copy of about 400 KiB does not.
        let result = try runHelper(["sqlite-migrate", temporary.root, "none", "team", "\(128 << 10)"])
        XCTAssertEqual(result.status, 0)
        // A typed I/O error; SQLite does not always keep the errno (EFBIG) of a failed WAL write.
        XCTAssertTrue(result.output.hasPrefix("error io errno \(EFBIG)") || result.output.hasPrefix("error io errno -"), result.output)
        XCTAssertTrue(result.output.contains("SQLite error"), result.output)
        let source = try await contents(temporary.root)
        XCTAssertEqual(source.count, 200)
        XCTAssertEqual(source["k199"], "value-199-\(padding)")
        let target = try await contents(temporary.root, group: team)
        XCTAssertTrue(target.isEmpty)
    }

    /// Several processes opening a new keystore at once: one makes the key file and seals the
    /// key check while another, which found no key file a moment before, looks for sealed
    /// data; it must then take the key the first one made, not report it missing.
    func testConcurrentFirstOpensAllTakeTheKeyOneOfThemMade() async throws {
        for round in 0..<60 {
            let temporary = try TemporaryRoot()
            let processes = try (0..<6).map { try helper(["sqlite-write", temporary.root, "\($0)", "1"]) }
            for process in processes {
                process.waitUntilExit()
                XCTAssertEqual(process.terminationStatus, 0, "round \(round)")
            }
            let items = try await contents(temporary.root)
            XCTAssertEqual(items.count, 7, "round \(round)")
        }
    }

    /// Several first runs at once, with the name of the user's directory taken by another
    /// member: they agree on one directory of the user's, and nothing any of them wrote is
    /// hidden in another.
    func testConcurrentFirstRunsWhoseNameIsTakenAgreeOnOneDirectory() async throws {
        guard getuid() == 0 else { throw missingPrerequisite("needs root to make an entry another user owns") }
        let temporary = try TemporaryRoot()
        let root = temporary.root
        for path in [root, root + "/users"] {
            XCTAssertEqual(mkdir(path, 0o700), 0)
            XCTAssertEqual(chown(path, 0, gid_t(Self.groupId)), 0)
            XCTAssertEqual(chmod(path, 0o3770), 0)
        }
        XCTAssertEqual(mkdir(root + "/users/\(geteuid())", 0o700), 0)
        XCTAssertEqual(chown(root + "/users/\(geteuid())", 60_001, gid_t(Self.groupId)), 0)
        let workers = 6
        let count = 5
        let processes = try (0..<workers).map { try helper(["sqlite-write", root, "\($0)", "\(count)"]) }
        for process in processes {
            process.waitUntilExit()
            XCTAssertEqual(process.terminationStatus, 0)
        }
        XCTAssertEqual(try ownEntries(in: root + "/users", prefix: "\(geteuid()).", owner: geteuid()).count, 1)
        let items = try await contents(root)
        XCTAssertEqual(items.count, workers * count + 1)
    }

    /// The names in `directory` that start with `prefix` and belong to `owner`.
    private func ownEntries(in directory: String, prefix: String, owner: uid_t) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).filter { name in
            var info = stat()
            return name.hasPrefix(prefix) && lstat(directory + "/" + name, &info) == 0 && info.st_uid == owner
        }.sorted()
    }

    // MARK: Two Unix users of one group

    private static let groupId = 60_000
    private static let setpriv = "/usr/bin/setpriv"

    /// A temporary directory others can pass through (0711), for tests that act as several
    /// users; skips without root and setpriv.
    private func multiUserTemporary() throws -> TemporaryRoot {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: Self.setpriv) else {
            throw missingPrerequisite("needs root and setpriv to act as two users of one Unix group")
        }
        let temporary = try TemporaryRoot()
        XCTAssertEqual(chmod(temporary.path, 0o711), 0)
        return temporary
    }

    /// A directory of `owner` and the shared group, with exactly `mode`.
    private func makeDirectory(_ path: String, owner: uid_t, mode: mode_t) {
        XCTAssertEqual(mkdir(path, 0o700), 0, path)
        XCTAssertEqual(chown(path, owner, gid_t(Self.groupId)), 0, path)
        XCTAssertEqual(chmod(path, mode), 0, path)
    }

    /// Runs `keystore-stress sqlite-shared …` as `uid` in the shared group with umask 077.
    private func runShared(as uid: Int, root: String, key: String) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.setpriv)
        process.arguments = [
            "--reuid=\(uid)", "--regid=\(Self.groupId)", "--clear-groups",
            "/bin/sh", "-c", "umask 077; exec \"$0\" \"$@\"",
            try stressExecutable().path, "sqlite-shared", root, "team", key,
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// Whoever controls a directory or link on the way to a root can rename what is under it,
    /// and move, withhold or roll back a user's private directory: every one must be root's or
    /// the user's (and a directory others can write, sticky). A member's root made first in
    /// `/tmp`, a member's root wherever it is, a member's directory in `/tmp` above the user's
    /// own root, and a link a member put in a team directory are all refused.
    func testTheWayToTheRootMustBeRootsOrTheUsers() throws {
        let temporary = try multiUserTemporary()
        let publicDirectory = temporary.path + "/tmp"
        makeDirectory(publicDirectory, owner: 0, mode: 0o1777)

        // A member's root, made first where everyone can make entries; users/ too, as its owner.
        let memberRoot = publicDirectory + "/ks"
        makeDirectory(memberRoot, owner: 60_001, mode: 0o3770)
        makeDirectory(memberRoot + "/users", owner: 60_001, mode: 0o3770)
        let victim = try runShared(as: 60_002, root: memberRoot, key: "bob")
        XCTAssertNotEqual(victim.status, 0)
        XCTAssertTrue(victim.output.contains("\(memberRoot) belongs to another user (uid 60001)"), victim.output)
        XCTAssertFalse(FileManager.default.fileExists(atPath: memberRoot + "/users/60002"))
        let owner = try runShared(as: 60_001, root: memberRoot, key: "alice")
        XCTAssertEqual(owner.status, 0, owner.output)
        // Wherever it is: its owner can rename users/ and everything in it.
        XCTAssertEqual(chmod(publicDirectory, 0o755), 0)
        let placed = try runShared(as: 60_002, root: memberRoot, key: "bob")
        XCTAssertNotEqual(placed.status, 0)
        XCTAssertTrue(placed.output.contains("belongs to another user (uid 60001)"), placed.output)
        XCTAssertEqual(chmod(publicDirectory, 0o1777), 0)

        // A member's directory made first in /tmp, above the user's own (new) root.
        let memberParent = publicDirectory + "/federate"
        makeDirectory(memberParent, owner: 60_001, mode: 0o1777)
        let underMember = try runShared(as: 60_002, root: memberParent + "/ks", key: "bob")
        XCTAssertNotEqual(underMember.status, 0)
        XCTAssertTrue(underMember.output.contains("\(memberParent) belongs to another user (uid 60001)"), underMember.output)
        XCTAssertFalse(FileManager.default.fileExists(atPath: memberParent + "/ks/users"))

        // A link a member put in a team directory, to a directory the user owns.
        let team = temporary.path + "/team"
        makeDirectory(team, owner: 0, mode: 0o3770)
        let own = temporary.path + "/bob-home"
        makeDirectory(own, owner: 60_002, mode: 0o700)
        XCTAssertEqual(symlink(own, team + "/bob-ks"), 0)
        XCTAssertEqual(lchown(team + "/bob-ks", 60_001, gid_t(Self.groupId)), 0)
        let throughLink = try runShared(as: 60_002, root: team + "/bob-ks", key: "bob")
        XCTAssertNotEqual(throughLink.status, 0)
        XCTAssertTrue(throughLink.output.contains("\(team)/bob-ks belongs to another user (uid 60001)"), throughLink.output)
        // The user's own link there is followed.
        XCTAssertEqual(lchown(team + "/bob-ks", 60_002, gid_t(Self.groupId)), 0)
        let ownLink = try runShared(as: 60_002, root: team + "/bob-ks", key: "bob")
        XCTAssertEqual(ownLink.status, 0, ownLink.output)
        XCTAssertTrue(FileManager.default.fileExists(atPath: own + "/users/60002"))

        // A member's link reached through the user's own: every link on the way counts.
        XCTAssertEqual(symlink(own, team + "/current"), 0)
        XCTAssertEqual(lchown(team + "/current", 60_001, gid_t(Self.groupId)), 0)
        XCTAssertEqual(symlink(team + "/current", own + "-link"), 0)
        XCTAssertEqual(lchown(own + "-link", 60_002, gid_t(Self.groupId)), 0)
        let chained = try runShared(as: 60_002, root: own + "-link", key: "bob")
        XCTAssertNotEqual(chained.status, 0)
        XCTAssertTrue(chained.output.contains("\(team)/current belongs to another user (uid 60001)"), chained.output)
    }

    /// A member whose process has the group database open makes its `-shm` read-only (0440)
    /// to the others. A reader that never writes (`federate credentials`) would then have
    /// SQLite map that live wal-index read-only, which the guard could not repair, and a
    /// truncation would end it. The guard refuses such a mapping: the reader gets an error at
    /// once, never the SIGBUS, and the member's own process goes on.
    func testAShmFileMadeReadOnlyByAMemberIsNotMapped() throws {
        let temporary = try multiUserTemporary()
        let root = temporary.path + "/shared-root"
        makeDirectory(root, owner: 0, mode: 0o3770)
        makeDirectory(root + "/users", owner: 0, mode: 0o3770)
        for (uid, key) in [(60_001, "alice"), (60_002, "bob")] {
            let run = try runShared(as: uid, root: root, key: key)
            XCTAssertEqual(run.status, 0, run.output)
        }
        let alice = try Conversation(["sqlite-shm-truncated", root, "team"], as: 60_001)
        XCTAssertEqual(alice.nextOutput(), "ready\n")
        let shm = try StoreLayout(root: root, service: "svc").databasePath(team) + "-shm"
        XCTAssertEqual(chmod(shm, 0o440), 0, shm)

        let bob = try Conversation(["sqlite-shm-read", root, "team", "alice"], as: 60_002)
        let first = bob.nextOutput()
        if first == "ready\n" {
            XCTAssertEqual(truncate(shm, 0), 0)
            bob.tell("go")
        }
        let (bobEnd, bobRest) = bob.finish()
        XCTAssertEqual(bobEnd, "exit 0", "bob: \(first)\(bobRest)")
        XCTAssertTrue(first.hasPrefix("error "), "the read-only -shm was mapped: \(first)\(bobRest)")

        XCTAssertEqual(chmod(shm, 0o660), 0, shm)
        alice.tell("go")
        let (aliceEnd, aliceRest) = alice.finish()
        XCTAssertEqual(aliceEnd, "exit 0", aliceRest)
        XCTAssertTrue(aliceRest.hasPrefix("k=before k2=after"), aliceRest)
    }

    /// A `keystore-stress` helper spoken to through its stdin and stdout; run as `uid` in the
    /// shared group when one is given.
    private struct Conversation {
        let process = Process()
        private let input = Pipe()
        private let output = Pipe()

        init(_ arguments: [String], as uid: Int? = nil) throws {
            let helper = try stressExecutable().path
            if let uid {
                process.executableURL = URL(fileURLWithPath: SQLiteMultiProcessTests.setpriv)
                process.arguments = ["--reuid=\(uid)", "--regid=\(SQLiteMultiProcessTests.groupId)", "--clear-groups", helper] + arguments
            } else {
                process.executableURL = URL(fileURLWithPath: helper)
                process.arguments = arguments
            }
            process.standardInput = input
            process.standardOutput = output
            try process.run()
        }

        /// What the helper printed since the last call (one line, or all it printed before
        /// exiting), once it printed something.
        func nextOutput() -> String {
            String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        }

        /// Writes `line` to the helper's stdin. A helper that died (of the SIGBUS these tests
        /// are about) has closed it, and the SIGPIPE would end the test process instead of
        /// failing the test.
        func tell(_ line: String) {
            let bytes = Array((line + "\n").utf8)
            let previous = signal(SIGPIPE, SIG_IGN)
            defer { signal(SIGPIPE, previous) }
            _ = bytes.withUnsafeBytes { write(input.fileHandleForWriting.fileDescriptor, $0.baseAddress, $0.count) }
        }

        /// How it ended ("exit N" or "signal N") and the rest of its output.
        func finish() -> (String, String) {
            let rest = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return ("\(process.terminationReason == .exit ? "exit" : "signal") \(process.terminationStatus)", rest)
        }
    }

    func testTwoUsersOfOneGroupWithUmask077ShareItems() throws {
        let temporary = try multiUserTemporary()
        let root = temporary.path + "/shared-root"
        makeDirectory(root, owner: 0, mode: 0o3770)

        // Only the root's owner (here root) may make users/: whoever owns it can rename any
        // user's private directory in it and put an older copy back later.
        let beforeUsers = try runShared(as: 60_001, root: root, key: "alice")
        XCTAssertNotEqual(beforeUsers.status, 0)
        XCTAssertTrue(beforeUsers.output.contains("install -d -m 3770 -g \(Self.groupId) \(root)/users"), beforeUsers.output)
        XCTAssertEqual(mkdir(root + "/users", 0o700), 0)
        XCTAssertEqual(chown(root + "/users", 0, gid_t(Self.groupId)), 0)
        XCTAssertEqual(chmod(root + "/users", 0o3770), 0)

        let alice = try runShared(as: 60_001, root: root, key: "alice")
        XCTAssertEqual(alice.status, 0, alice.output)
        // Alice takes the name of Bob's private directory before his first run (he could not
        // remove it; sticky users/): Bob gets a users/60002.<N> of his own instead, and
        // keeps it.
        makeDirectory(root + "/users/60002", owner: 60_001, mode: 0o700)
        let bob = try runShared(as: 60_002, root: root, key: "bob")
        XCTAssertEqual(bob.status, 0, bob.output)
        XCTAssertEqual(bob.output, "alice=from-60001\nbob=from-60002\n")
        let bobs = try ownEntries(in: root + "/users", prefix: "60002.", owner: 60_002)
        XCTAssertEqual(bobs.count, 1, "\(bobs)")
        XCTAssertEqual(mode(of: root + "/users/" + (bobs.first ?? "-")), 0o700)
        let bobAgain = try runShared(as: 60_002, root: root, key: "bob")
        XCTAssertEqual(bobAgain.status, 0, bobAgain.output)
        XCTAssertEqual(try ownEntries(in: root + "/users", prefix: "60002.", owner: 60_002), bobs)
        let aliceAgain = try runShared(as: 60_001, root: root, key: "alice2")
        XCTAssertEqual(aliceAgain.status, 0, aliceAgain.output)
        XCTAssertEqual(aliceAgain.output, "alice=from-60001\nalice2=from-60001\nbob=from-60002\n")

        let layout = try StoreLayout(root: root, service: "svc")
        XCTAssertEqual(mode(of: layout.namespaceDirectory(team)), 0o2770)
        XCTAssertEqual(mode(of: layout.databasePath(team)), 0o660)
        XCTAssertEqual(mode(of: layout.keyFilePath(team)), 0o640)
        XCTAssertEqual(mode(of: root + "/users/60001"), 0o700)

        // A users/ that a member owns (made by an earlier release) keeps working for that
        // member and is refused for every other one.
        XCTAssertEqual(chown(root + "/users", 60_001, gid_t(Self.groupId)), 0)
        XCTAssertEqual(chmod(root + "/users", 0o3770), 0)
        let owner = try runShared(as: 60_001, root: root, key: "alice3")
        XCTAssertEqual(owner.status, 0, owner.output)
        let other = try runShared(as: 60_002, root: root, key: "bob2")
        XCTAssertNotEqual(other.status, 0)
        XCTAssertTrue(other.output.contains("users/ belongs to another member (uid 60001)"), other.output)
        // Whatever its mode: its owner can rename entries in it, and chmod it back.
        XCTAssertEqual(chmod(root + "/users", 0o2750), 0)
        let closed = try runShared(as: 60_002, root: root, key: "bob2")
        XCTAssertTrue(closed.output.contains("users/ belongs to another member (uid 60001)"), closed.output)
        XCTAssertEqual(chown(root + "/users", 0, gid_t(Self.groupId)), 0)
        XCTAssertEqual(chmod(root + "/users", 0o3770), 0)

        // A group-writable root without the sticky bit is refused for every member.
        XCTAssertEqual(chmod(root, 0o2770), 0)
        let refused = try runShared(as: 60_002, root: root, key: "bob")
        XCTAssertNotEqual(refused.status, 0)
        XCTAssertTrue(refused.output.contains("chmod +t"), refused.output)
    }
}
