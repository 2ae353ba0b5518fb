// broker-bench modes for the SQLite keystore behind a FederationClient (issue 10):
//
//   broker-bench storage-throughput --endpoint URL --directory DIR --concurrency C
//       in-memory vs SQLite-durable federations/s, alternating; optionally the fdatasync floor
//   broker-bench seed --directory DIR --sessions N           N saved sessions, batches of 10,000
//   broker-bench startup --directory DIR --session NAME      ms: open keystore + client, read one
//   broker-bench store-memory --endpoint URL --directory DIR RSS after touching sessions
//   broker-bench sqlite-migrate --directory DIR --items N    seconds for SQLiteKeystore.migrate
//
// Every mode prints its headline figure alone on its last line.

import ArgumentParser
import ClosedLoop
import Federation
import SecureStorage
import Synchronization

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

let benchService = "bench"

func openSQLiteKeystore(_ directory: String) throws -> SQLiteKeystore {
    try SQLiteKeystore(root: directory, service: benchService)
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

/// The plaintext item a client stores for one federated session, captured through the public
/// API so the benchmarks can seed many saved sessions without federating each: a stored
/// session embeds neither its name nor its key (the keystore binds the sealed item to its key
/// when it commits it), so copies under other keys read back as sessions of those names. Every
/// copy carries the canned Cognito's one identity ID; the startup and memory figures read
/// sessions, so that does not change what they measure.
struct StoredSessionTemplate: Sendable {
    /// What the client puts before a session's name to make its keystore key.
    let keyPrefix: String
    /// The plaintext the client committed (the keystore seals it).
    let value: [UInt8]
    /// The version the client committed it with.
    let version: Int64?

    /// Federates one session against the canned Cognito at `endpoint` into a recording keystore.
    static func federated(endpoint: String) async throws -> StoredSessionTemplate {
        let name = "template"
        let keystore = RecordingKeystore()
        let client = try FederationClient(configuration: .init(identityPoolId: poolId, endpoint: endpoint), keystore: keystore)
        _ = try await client.federate(token: opaqueToken, provider: .facebook, session: name)
        await client.shutdown()
        guard let (key, value, version) = keystore.lastSet(endingWith: name) else {
            fatalError("the client stored no item for session \(name)")
        }
        return StoredSessionTemplate(keyPrefix: String(key.dropLast(name.count)), value: value, version: version)
    }

    /// The item to commit for session `name`.
    func item(session name: String) -> (key: String, value: [UInt8], version: Int64?) {
        (keyPrefix + name, value, version)
    }
}

/// An ``InMemoryKeystore`` that remembers what it was asked to set, versions included
/// (`Keystore.value(forKey:)` returns the value alone).
final class RecordingKeystore: Keystore {
    private let base = InMemoryKeystore(service: benchService)
    private let sets = Mutex<[(key: String, value: [UInt8], version: Int64?)]>([])

    var service: String { base.service }
    var accessGroup: AccessGroup { base.accessGroup }

    func value(forKey key: String) async throws(KeystoreError) -> [UInt8]? { try await base.value(forKey: key) }
    func keys() async throws(KeystoreError) -> [String] { try await base.keys() }
    func changes() -> AsyncStream<KeystoreChange> { base.changes() }
    func close() { base.close() }

    @discardableResult
    func commit(_ batch: KeystoreBatch) async throws(KeystoreError) -> [Bool] {
        sets.withLock { sets in
            for case .set(let key, let value, let version) in batch.operations { sets.append((key, value, version)) }
        }
        return try await base.commit(batch)
    }

    /// The last set of a key ending in `suffix`.
    func lastSet(endingWith suffix: String) -> (key: String, value: [UInt8], version: Int64?)? {
        sets.withLock { $0.last { $0.key.hasSuffix(suffix) } }
    }
}

/// User + system CPU seconds of this process so far.
/// One timed run of a storage benchmark: `warmup` untimed federations, then `federations`
/// timed ones, `concurrency` at a time. Returns federations per second and this process's CPU
/// time (user + system) per federation in µs.
func timedFederations(
    _ client: FederationClient, round: Int, warmup: Int, federations: Int, concurrency: Int
) async throws -> (rate: Double, cpu: Double) {
    try await federateAll(client, prefix: "w\(round)-", count: warmup, concurrency: concurrency)
    let cpuStart = processCPUSeconds()
    let start = monotonicSeconds()
    try await federateAll(client, prefix: "u\(round)-", count: federations, concurrency: concurrency)
    let elapsed = monotonicSeconds() - start
    return (Double(federations) / elapsed, (processCPUSeconds() - cpuStart) / Double(federations) * 1e6)
}

func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// Bytes of a sealed stored session: its JSON plus AES-GCM's version, nonce and tag.
func sealedSessionSize(endpoint: String) async throws -> Int {
    try await StoredSessionTemplate.federated(endpoint: endpoint).value.count + 1 + 12 + 16
}

/// The durability floor for one federation: append a sealed-session-sized record to a file
/// and `fdatasync` it, `items` times; records per second.
func fdatasyncFloor(directory: String, items: Int, recordBytes: Int) -> Double {
    let path = "\(directory)/floor.log"
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o600)
    precondition(fd >= 0, "open failed: \(errno)")
    defer {
        close(fd)
        unlink(path)
    }
    let payload = Array(repeating: UInt8(0x5A), count: recordBytes)
    // The first append allocates the file's first block; time steady-state appends.
    for _ in 0..<10 { precondition(payload.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == payload.count && fdatasync(fd) == 0) }
    let start = monotonicSeconds()
    for _ in 0..<items {
        let written = payload.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        precondition(written == payload.count && fdatasync(fd) == 0)
    }
    return Double(items) / (monotonicSeconds() - start)
}

struct StorageThroughput: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storage-throughput",
        abstract: "Federations/s with no keystore (InMemoryKeystore) and with a durable SQLiteKeystore, alternating.",
        discussion: """
            Each round runs the in-memory client, then a client on a fresh SQLiteKeystore under \
            DIR/roundN, then (with --floor-items) the fdatasync floor in DIR. Prints the medians \
            (inmemory_fed_per_s, sqlite_fed_per_s, floor_per_s, record_bytes); the last line is the \
            SQLite median.
            """)

    @Option(help: "The canned Cognito endpoint.") var endpoint: String
    @Option(help: "A directory for the keystores (on the disk to measure).") var directory: String
    @Option(help: "Federations to time per run.") var federations = 3_000
    @Option(help: "Federations in flight at once.") var concurrency = 1
    @Option(help: "Untimed federations first, per client.") var warmup = 200
    @Option(help: "Rounds; medians are printed.") var repeats = 3
    @Option(help: "Appends+fdatasync of the floor per round (0: no floor).") var floorItems = 0

    func run() async throws {
        let recordBytes = try await sealedSessionSize(endpoint: endpoint)
        var memoryRates: [Double] = []
        var sqliteRates: [Double] = []
        var floorRates: [Double] = []
        var memoryCPU: [Double] = []
        var sqliteCPU: [Double] = []
        for round in 0..<max(1, repeats) {
            let inMemory = try makeClient(endpoint: endpoint)
            let memoryRun = try await timedFederations(inMemory, round: round, warmup: warmup, federations: federations, concurrency: concurrency)
            memoryRates.append(memoryRun.rate)
            memoryCPU.append(memoryRun.cpu)

            let root = "\(directory)/round\(round)"
            let keystore = try openSQLiteKeystore(root)
            let durable = try FederationClient(configuration: .init(identityPoolId: poolId, endpoint: endpoint), keystore: keystore)
            let sqliteRun = try await timedFederations(durable, round: round, warmup: warmup, federations: federations, concurrency: concurrency)
            sqliteRates.append(sqliteRun.rate)
            sqliteCPU.append(sqliteRun.cpu)
            let stored = try await keystore.keys().count
            precondition(stored == warmup + federations, "expected \(warmup + federations) stored sessions, got \(stored)")
            keystore.close()

            if floorItems > 0 {
                floorRates.append(fdatasyncFloor(directory: directory, items: floorItems, recordBytes: recordBytes))
            }
            print("round \(round + 1), c = \(concurrency): in-memory \(fixed(1, memoryRates.last!)) fed/s, "
                + "SQLite \(fixed(1, sqliteRates.last!)) fed/s; CPU per federation in-memory \(fixed(1, memoryCPU.last!)) µs, "
                + "SQLite \(fixed(1, sqliteCPU.last!)) µs"
                + (floorItems > 0 ? ", floor \(fixed(1, floorRates.last!)) appends+fdatasync/s" : ""))
        }
        print("inmemory_fed_per_s \(fixed(1, median(memoryRates)))")
        print("sqlite_fed_per_s \(fixed(1, median(sqliteRates)))")
        print("inmemory_cpu_us \(fixed(1, median(memoryCPU)))")
        print("sqlite_cpu_us \(fixed(1, median(sqliteCPU)))")
        if floorItems > 0 { print("floor_per_s \(fixed(1, median(floorRates)))") }
        print("record_bytes \(recordBytes)")
        print(fixed(1, median(sqliteRates)))
    }
}

struct FdatasyncFloor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fdatasync-floor", abstract: "Appends of a sealed-session-sized record + fdatasync per second.")

    @Option(help: "The canned Cognito endpoint (federates the one session whose size is appended).") var endpoint: String
    @Option(help: "An existing directory.") var directory: String
    @Option(help: "Appends to time.") var items = 1_000

    func run() async throws {
        print(fixed(1, fdatasyncFloor(directory: directory, items: items, recordBytes: try await sealedSessionSize(endpoint: endpoint))))
    }
}

struct Seed: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Writes N saved sessions (s0 … sN-1) as a client stores them, in batches, straight through SQLiteKeystore.commit.")

    @Option(help: "The canned Cognito endpoint (federates the one session copied N times).") var endpoint: String
    @Option(help: "The keystore root.") var directory: String
    @Option(help: "Sessions to write.") var sessions = 100_000
    @Option(help: "Sessions per commit.") var batch = 10_000

    func run() async throws {
        let template = try await StoredSessionTemplate.federated(endpoint: endpoint)
        let keystore = try openSQLiteKeystore(directory)
        let start = monotonicSeconds()
        var written = 0
        while written < sessions {
            var keystoreBatch = KeystoreBatch()
            for index in written..<min(sessions, written + batch) {
                let item = template.item(session: "s\(index)")
                keystoreBatch.set(item.value, forKey: item.key, version: item.version)
            }
            written += keystoreBatch.operations.count
            try await keystore.commit(keystoreBatch)
        }
        keystore.close()
        let seconds = monotonicSeconds() - start
        print("seeded \(sessions) sessions in \(fixed(2, seconds)) s")
        print(fixed(3, seconds))
    }
}

struct Startup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Milliseconds to open an SQLiteKeystore, create a FederationClient on it and read one saved session.")

    @Option(help: "A seeded keystore root.") var directory: String
    @Option(help: "The session to read.") var session = "s12345"
    @Option(help: "The canned Cognito endpoint (never contacted).") var endpoint = "http://127.0.0.1:9/"

    func run() async throws {
        let start = monotonicSeconds()
        let keystore = try openSQLiteKeystore(directory)
        let client = try FederationClient(configuration: .init(identityPoolId: poolId, endpoint: endpoint), keystore: keystore)
        let snapshot = try await client.session(session)
        let milliseconds = (monotonicSeconds() - start) * 1000
        precondition(snapshot.state == .federated, "session \(session) is \(snapshot.state), not federated")
        print(fixed(3, milliseconds))
    }
}

struct StoreMemory: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store-memory",
        abstract: "Resident memory of a client over a seeded SQLiteKeystore after reading many distinct sessions through it.")

    @Option(help: "A seeded keystore root.") var directory: String
    @Option(help: "The canned Cognito endpoint (never contacted).") var endpoint = "http://127.0.0.1:9/"
    @Option(help: "Distinct sessions to read (s0 …).") var touch = 50_000
    @Option(help: "The client's session cache capacity.") var cache = 10_000
    @Option(help: "Reads in flight at once.") var concurrency = 16

    func run() async throws {
        let keystore = try openSQLiteKeystore(directory)
        let client = try FederationClient(
            configuration: .init(identityPoolId: poolId, endpoint: endpoint, sessionCacheCapacity: cache), keystore: keystore)
        let start = monotonicSeconds()
        try await forEachIndex(count: touch, concurrency: concurrency) { index in
            let state = try await client.session("s\(index)").state
            precondition(state == .federated, "session s\(index) is \(state)")
        }
        let seconds = monotonicSeconds() - start
        let footprint = memoryFootprint()
        print("read \(touch) distinct sessions in \(fixed(2, seconds)) s (cache \(cache))")
        print("heap_bytes \(footprint.heap) rss_bytes \(footprint.rss)")
        withExtendedLifetime(client) {}
        print(footprint.rss)
    }
}

struct SQLiteMigrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sqlite-migrate",
        abstract: "Seconds for SQLiteKeystore.migrate of N items from no group to a named group (filling them is not timed).")

    @Option(help: "The canned Cognito endpoint (federates the one session copied N times).") var endpoint: String
    @Option(help: "An empty keystore root.") var directory: String
    @Option(help: "Items to migrate.") var items = 10_000

    func run() async throws {
        let template = try await StoredSessionTemplate.federated(endpoint: endpoint)
        let keystore = try openSQLiteKeystore(directory)
        var batch = KeystoreBatch()
        for index in 0..<items {
            let item = template.item(session: "s\(index)")
            batch.set(item.value, forKey: item.key, version: item.version)
        }
        try await keystore.commit(batch)
        keystore.close()
        let start = monotonicSeconds()
        let moved = try await SQLiteKeystore.migrate(
            root: directory, service: benchService, from: .none, to: AccessGroup(name: "bench-group"))
        let seconds = monotonicSeconds() - start
        precondition(moved == items, "migrated \(moved) of \(items)")
        let migrated = try SQLiteKeystore(root: directory, service: benchService, accessGroup: AccessGroup(name: "bench-group"))
        let count = try await migrated.keys().count
        precondition(count == items, "the target holds \(count) of \(items)")
        print(fixed(3, seconds))
    }
}
