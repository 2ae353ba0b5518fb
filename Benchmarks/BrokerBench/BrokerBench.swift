// broker-bench: IdentityBroker measured in-process, for Benchmarks/compare.sh.
//
//   broker-bench --endpoint URL --federations N --concurrency C     federations per second
//   broker-bench memory --endpoint URL --sessions N                 bytes per live session
//   broker-bench keystore --directory DIR --items N                 get µs, durable sets/s
//   broker-bench fsync-floor --directory DIR --items N              write+fsync+rename+dir-fsync/s
//   broker-bench migrate --directory DIR --items N                  seconds to migrate N items
//   (and the SQLite keystore modes in StorageBench.swift)
//
// Every mode prints its headline figure alone on its last line.

import ArgumentParser
import ClosedLoop
import Federation
import SecureStorage

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

@main
struct BrokerBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "broker-bench",
        abstract: "Benchmarks IdentityBroker against a canned Cognito endpoint and its keystore.",
        subcommands: [
            Throughput.self, Memory.self, KeystoreBench.self, FsyncFloor.self, Migrate.self,
            StorageThroughput.self, FdatasyncFloor.self, Seed.self, Startup.self, StoreMemory.self, SQLiteMigrate.self,
            PostgresThroughput.self, PostgresEvents.self, RecordBytes.self,
        ],
        defaultSubcommand: Throughput.self
    )
}

/// A provider token that is not a JWT (Facebook's are opaque), so no local parsing is timed.
let opaqueToken = "EAAGm0PX4ZCpsBAKZCZBbench0token0opaque0value0ZD"
let poolId = "us-east-1:00000000-0000-4000-8000-000000000000"

func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

func makeClient(endpoint: String) throws -> FederationClient {
    try FederationClient(configuration: .init(identityPoolId: poolId, endpoint: endpoint))
}

/// Federates sessions `prefix0 ..< prefix(count-1)` from `concurrency` callers (a closed
/// loop, see `forEachIndex`); every name is new to the client, so each federation is GetId +
/// GetCredentialsForIdentity.
func federateAll(_ client: FederationClient, prefix: String, count: Int, concurrency: Int) async throws {
    try await forEachIndex(count: count, concurrency: concurrency) { index in
        _ = try await client.federate(token: opaqueToken, provider: .facebook, session: "\(prefix)\(index)")
    }
}

struct Throughput: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "throughput", abstract: "Federations per second (GetId + GetCredentialsForIdentity each).")

    @Option(help: "The canned Cognito endpoint, e.g. http://127.0.0.1:8080/") var endpoint: String
    @Option(help: "Federations to time.") var federations = 10_000
    @Option(help: "Federations in flight at once.") var concurrency = 1
    @Option(help: "Untimed federations first (connections, caches).") var warmup = 500
    @Option(help: "Timed runs; the median is printed.") var repeats = 1

    func run() async throws {
        var rates: [Double] = []
        for round in 0..<max(1, repeats) {
            // A fresh client per round, so every session name is new and GetId always runs.
            let client = try makeClient(endpoint: endpoint)
            try await federateAll(client, prefix: "w\(round)-", count: warmup, concurrency: concurrency)
            let start = monotonicSeconds()
            try await federateAll(client, prefix: "u", count: federations, concurrency: concurrency)
            let elapsed = monotonicSeconds() - start
            let names = try await client.sessionNames().count
            precondition(names == warmup + federations, "expected \(warmup + federations) sessions, got \(names)")
            rates.append(Double(federations) / elapsed)
            print("run \(round + 1): \(federations) federations at concurrency \(concurrency) in \(fixed(3, elapsed)) s")
        }
        rates.sort()
        print(fixed(1, rates[rates.count / 2]))
    }
}

/// `value` with `digits` decimals (no Foundation in this target).
func fixed(_ digits: Int, _ value: Double) -> String {
    guard value.isFinite else { return "\(value)" }
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let scaled = (abs(value) * scale).rounded()
    let whole = Int(scaled / scale)
    let fraction = Int(scaled - Double(whole) * scale)
    var text = (value < 0 && scaled != 0 ? "-" : "") + String(whole)
    if digits > 0 {
        let digitsText = String(fraction)
        text += "." + String(repeating: "0", count: max(0, digits - digitsText.count)) + digitsText
    }
    return text
}

/// glibc's `malloc_trim` and `malloc_stats` (declared in <malloc.h>, which the Glibc module
/// does not import), looked up at run time.
private let mallocTrim = dlsym(nil, "malloc_trim").map {
    unsafeBitCast($0, to: (@convention(c) (Int) -> Int32).self)
}
private let mallocStats = dlsym(nil, "malloc_stats").map {
    unsafeBitCast($0, to: (@convention(c) () -> Void).self)
}

func trimHeap() { _ = mallocTrim?(0) }

/// Heap bytes in use (all arenas plus mmapped chunks: mallinfo2's uordblks + hblkhd), read
/// from the `Total (incl. mmap)` block `malloc_stats` prints, and the resident set size.
func memoryFootprint() -> (heap: Int, rss: Int) {
    var heap = 0
    if let mallocStats {
        var path = Array("/tmp/broker-bench-malloc-XXXXXX".utf8CString)
        let fd = path.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        if fd >= 0 {
            fflush(nil)
            let saved = dup(2)
            dup2(fd, 2)
            mallocStats()
            fflush(nil)
            dup2(saved, 2)
            close(saved)
            lseek(fd, 0, SEEK_SET)
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count <= 0 { break }
                bytes += buffer[..<count]
            }
            close(fd)
            path.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
            let text = String(decoding: bytes, as: UTF8.self)
            // The last "in use bytes" line is the one under "Total (incl. mmap):".
            if let line = text.split(separator: "\n").last(where: { $0.contains("in use bytes") }),
               let number = line.split(separator: "=").last {
                heap = Int(number.filter { $0.isNumber }) ?? 0
            }
        }
    }
    var rss = 0
    if let file = fopen("/proc/self/statm", "r") {
        var line = [CChar](repeating: 0, count: 256)
        if fgets(&line, Int32(line.count), file) != nil {
            let fields = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                .split(separator: " ")
            if fields.count > 1, let pages = Int(fields[1]) { rss = pages * Int(sysconf(Int32(_SC_PAGESIZE))) }
        }
        fclose(file)
    }
    return (heap, rss)
}

struct Memory: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Memory per live session: heap and RSS before vs after federating N new sessions.")

    @Option(help: "The canned Cognito endpoint.") var endpoint: String
    @Option(help: "Live sessions to add.") var sessions = 1_000
    @Option(help: "Federations in flight while adding them.") var concurrency = 64

    func run() async throws {
        let client = try makeClient(endpoint: endpoint)
        // Warm up everything that is not per session: the transport, its connections, the
        // dictionaries' first growth, the cooperative pool, Foundation's caches.
        try await federateAll(client, prefix: "warm", count: 256, concurrency: concurrency)
        trimHeap()
        let before = memoryFootprint()
        try await federateAll(client, prefix: "s", count: sessions, concurrency: concurrency)
        trimHeap()
        let after = memoryFootprint()
        let live = try await client.sessionNames().count
        precondition(live == sessions + 256)
        let heapPer = Double(after.heap - before.heap) / Double(sessions)
        let rssPer = Double(after.rss - before.rss) / Double(sessions)
        print("sessions \(sessions): heap \(before.heap) -> \(after.heap), rss \(before.rss) -> \(after.rss)")
        print("heap_bytes_per_session \(fixed(0, heapPer)) rss_bytes_per_session \(fixed(0, rssPer))")
        withExtendedLifetime(client) {}
        print(fixed(0, heapPer))
    }
}

/// A value the size of a saved session (identity ID, provider, credentials as JSON).
func sampleValue() -> [UInt8] {
    Array(repeating: UInt8(ascii: "x"), count: 1_300)
}

func openKeystore(_ directory: String, group: AccessGroup = .none) throws -> SQLiteKeystore {
    try SQLiteKeystore(root: directory, service: "bench", accessGroup: group, keySource: .raw(Array(repeating: 7, count: 32)))
}

struct KeystoreBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keystore", abstract: "SQLiteKeystore: microseconds per get, durable sequential sets per second.")

    @Option(help: "An empty directory to use as the keystore root.") var directory: String
    @Option(help: "Items to set and then get.") var items = 1_000
    @Option(help: "Gets to time (cycling through the items).") var gets = 50_000

    func run() async throws {
        let keystore = try openKeystore(directory)
        defer { keystore.close() }
        let value = sampleValue()
        let start = monotonicSeconds()
        for index in 0..<items {
            try await keystore.set(value, forKey: "session.u\(index)")
        }
        let setSeconds = monotonicSeconds() - start
        let getStart = monotonicSeconds()
        for index in 0..<gets {
            guard try await keystore.value(forKey: "session.u\(index % items)")?.count == value.count else {
                fatalError("keystore lost an item")
            }
        }
        let getSeconds = monotonicSeconds() - getStart
        print("durable_sets_per_second \(fixed(1, Double(items) / setSeconds))")
        print("get_us \(fixed(2, getSeconds / Double(gets) * 1e6))")
        print(fixed(1, Double(items) / setSeconds))
    }
}

/// The durable-write floor: exactly the system calls of an atomic, durable replace, with a
/// payload the size of a sealed item and nothing else (no sealing, no lock, no random name).
struct FsyncFloor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fsync-floor", abstract: "open+write+fsync+close+rename+directory fsync per second.")

    @Option(help: "An existing directory.") var directory: String
    @Option(help: "Replacements to time.") var items = 1_000

    func run() throws {
        let payload = Array(repeating: UInt8(0x5A), count: sampleValue().count + 29)
        let start = monotonicSeconds()
        for index in 0..<items {
            let temporary = "\(directory)/.tmp.\(index)"
            let target = "\(directory)/item\(index).item"
            let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            precondition(fd >= 0, "open failed: \(errno)")
            let written = payload.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            precondition(written == payload.count && fsync(fd) == 0)
            close(fd)
            precondition(rename(temporary, target) == 0)
            let directoryFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            precondition(directoryFD >= 0 && fsync(directoryFD) == 0)
            close(directoryFD)
        }
        let seconds = monotonicSeconds() - start
        print(fixed(1, Double(items) / seconds))
    }
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Seconds for SQLiteKeystore.migrate of N items from no group to a named group.",
        discussion: """
            --fill-only writes the N items and stops (compare.sh runs that step with fsync \
            disabled by LD_PRELOAD, since it is set-up, not the measurement); --skip-fill \
            migrates what an earlier --fill-only wrote.
            """)

    @Option(help: "The keystore root (empty unless --skip-fill).") var directory: String
    @Option(help: "Items to migrate.") var items = 10_000
    @Flag(help: "Only write the items.") var fillOnly = false
    @Flag(help: "Do not write the items; migrate those already there.") var skipFill = false

    func run() async throws {
        if !skipFill {
            let keystore = try openKeystore(directory)
            defer { keystore.close() }
            let value = sampleValue()
            let fillStart = monotonicSeconds()
            var batch = KeystoreBatch()
            for index in 0..<items {
                batch.set(value, forKey: "session.u\(index)")
            }
            try await keystore.commit(batch)
            print("filled \(items) items in \(fixed(2, monotonicSeconds() - fillStart)) s")
            if fillOnly { return }
        }
        let start = monotonicSeconds()
        let moved = try await SQLiteKeystore.migrate(
            root: directory, service: "bench", from: .none, to: AccessGroup(name: "bench-group"),
            keySource: .raw(Array(repeating: 7, count: 32)))
        let seconds = monotonicSeconds() - start
        precondition(moved == items, "migrated \(moved) of \(items)")
        let migrated = try openKeystore(directory, group: AccessGroup(name: "bench-group"))
        defer { migrated.close() }
        let count = try await migrated.keys().count
        precondition(count == items)
        print(fixed(3, seconds))
    }
}
