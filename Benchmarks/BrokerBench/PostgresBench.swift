// broker-bench modes for the PostgreSQL keystore behind a FederationClient (issue 11):
//
//   broker-bench postgres-throughput --endpoint URL --url postgres://… --concurrency C
//       in-memory vs PostgreSQL-durable federations/s, alternating (fresh service per round)
//   broker-bench postgres-events --endpoint URL --url postgres://… --events N
//       cross-instance change delay: instance A commits, instance B's changes() sees it
//   broker-bench record-bytes --endpoint URL   the sealed-session size the floor inserts
//
// Every mode prints its headline figure alone on its last line.

import ArgumentParser
import Federation
import PostgresKeystore
import SecureStorage
import Synchronization

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// One key for every instance, as a fleet shares it.
let benchPostgresKey = [UInt8](repeating: 0x42, count: 32)

func openPostgresKeystore(_ url: String, service: String, maximumConnections: Int? = nil) async throws -> PostgresKeystore {
    var configuration = try PostgresKeystore.Configuration(url: url)
    configuration.operationTimeout = .seconds(60)
    if let maximumConnections { configuration.maximumConnections = maximumConnections }
    return try await PostgresKeystore(configuration: configuration, service: service, keySource: .raw(benchPostgresKey))
}

struct PostgresThroughput: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "postgres-throughput",
        abstract: "Federations/s with no keystore (InMemoryKeystore) and with a durable PostgresKeystore, alternating.",
        discussion: """
            Each round runs the in-memory client, then a client on a PostgresKeystore under a fresh \
            service name (an empty namespace) in the database of --url. Prints the medians \
            (inmemory_fed_per_s, postgres_fed_per_s, record_bytes); the last line is the PostgreSQL median.
            """)

    @Option(help: "The canned Cognito endpoint.") var endpoint: String
    @Option(help: "postgres://user[:password]@host:port/db (default server settings).") var url: String
    @Option(help: "Federations to time per run.") var federations = 3_000
    @Option(help: "Federations in flight at once.") var concurrency = 1
    @Option(help: "Untimed federations first, per client.") var warmup = 200
    @Option(help: "Rounds; medians are printed.") var repeats = 3
    @Option(help: "The keystore's connection pool size (default: the configuration's).") var maximumConnections: Int?

    func run() async throws {
        var memoryRates: [Double] = []
        var postgresRates: [Double] = []
        var memoryCPU: [Double] = []
        var postgresCPU: [Double] = []
        let runTag = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        for round in 0..<max(1, repeats) {
            let inMemory = try makeClient(endpoint: endpoint)
            let memoryRun = try await timedFederations(inMemory, round: round, warmup: warmup, federations: federations, concurrency: concurrency)
            memoryRates.append(memoryRun.rate)
            memoryCPU.append(memoryRun.cpu)
            await inMemory.shutdown()

            let keystore = try await openPostgresKeystore(
                url, service: "bench-\(runTag)-c\(concurrency)-r\(round)", maximumConnections: maximumConnections)
            let durable = try FederationClient(configuration: .init(identityPoolId: poolId, endpoint: endpoint), keystore: keystore)
            let postgresRun = try await timedFederations(durable, round: round, warmup: warmup, federations: federations, concurrency: concurrency)
            postgresRates.append(postgresRun.rate)
            postgresCPU.append(postgresRun.cpu)
            let stored = try await keystore.keys().count
            precondition(stored == warmup + federations, "expected \(warmup + federations) stored sessions, got \(stored)")
            await durable.shutdown()
            await keystore.close()
            print("round \(round + 1), c = \(concurrency): in-memory \(fixed(1, memoryRates.last!)) fed/s, "
                + "PostgreSQL \(fixed(1, postgresRates.last!)) fed/s; CPU per federation (this process) in-memory "
                + "\(fixed(1, memoryCPU.last!)) µs, PostgreSQL \(fixed(1, postgresCPU.last!)) µs")
        }
        print("inmemory_fed_per_s \(fixed(1, median(memoryRates)))")
        print("postgres_fed_per_s \(fixed(1, median(postgresRates)))")
        print("inmemory_cpu_us \(fixed(1, median(memoryCPU)))")
        print("postgres_cpu_us \(fixed(1, median(postgresCPU)))")
        print("record_bytes \(try await sealedSessionSize(endpoint: endpoint))")
        print(fixed(1, median(postgresRates)))
    }
}

struct PostgresEvents: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "postgres-events",
        abstract: "Cross-instance change delay: instance A commits one set, instance B's changes() reports it.",
        discussion: """
            Two PostgresKeystore instances (two connection pools) on one database and service. For \
            each event A commits a sealed-session-sized set of a new key; the delay runs from the \
            start of A's commit call to B's stream yielding that key (so it includes A's commit). \
            Then the same between two FederationClients, one on each instance: client A federates a \
            new session against the canned Cognito, and the delay runs from the start of that call to \
            client B's state stream for the session reporting federated (so it includes A's whole \
            federation, and B's read of the session after the notification). Prints \
            commit_ms_median, event_ms_median, event_ms_p99, federate_ms_median, client_event_ms_median, \
            client_event_ms_p99; the last line is the median keystore-to-keystore delay.
            """)

    @Option(help: "The canned Cognito endpoint (federates the one session each event writes).") var endpoint: String
    @Option(help: "postgres://user[:password]@host:port/db.") var url: String
    @Option(help: "Events to time.") var events = 500
    @Option(help: "Untimed events first.") var warmup = 50
    @Option(help: "Pause between events, milliseconds (events are not queued behind each other).") var pauseMs = 2

    func run() async throws {
        let service = "events-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))"
        let writer = try await openPostgresKeystore(url, service: service)
        let reader = try await openPostgresKeystore(url, service: service)
        // B's stream is read by its own task, which timestamps every key as it arrives.
        let arrivals = Arrivals()
        let stream = reader.changes()
        let consumer = Task {
            for await change in stream {
                if case .item(let key) = change { arrivals.record(key, at: monotonicSeconds()) }
            }
        }
        let value = try await StoredSessionTemplate.federated(endpoint: endpoint).value
        // Let B's feed start listening: commit probes until one arrives.
        var ready = false
        for attempt in 0..<200 where !ready {
            try await writer.set(value, forKey: "probe-\(attempt)")
            for _ in 0..<100 where !ready {
                try await Task.sleep(for: .milliseconds(1))
                ready = arrivals.time(of: "probe-\(attempt)") != nil
            }
        }
        precondition(ready, "instance B's change feed never reported a commit")

        var commitMs: [Double] = []
        var delayMs: [Double] = []
        for index in 0..<(warmup + events) {
            let key = "event-\(index)"
            let start = monotonicSeconds()
            try await writer.set(value, forKey: key)
            let committed = monotonicSeconds()
            var arrived = arrivals.time(of: key)
            let deadline = committed + 10
            while arrived == nil && monotonicSeconds() < deadline {
                try await Task.sleep(for: .microseconds(100))
                arrived = arrivals.time(of: key)
            }
            guard let arrived else { fatalError("event \(index) never reached instance B") }
            if index >= warmup {
                commitMs.append((committed - start) * 1000)
                delayMs.append((arrived - start) * 1000)
            }
            if pauseMs > 0 { try await Task.sleep(for: .milliseconds(pauseMs)) }
        }
        consumer.cancel()

        // Client to client: what a fleet's instances see of each other's federations.
        let clientA = try FederationClient(configuration: .init(identityPoolId: poolId, endpoint: endpoint), keystore: writer)
        let clientB = try FederationClient(configuration: .init(identityPoolId: poolId, endpoint: endpoint), keystore: reader)
        var federateMs: [Double] = []
        var clientDelayMs: [Double] = []
        for index in 0..<(warmup + events) {
            let session = "client-event-\(index)"
            let updates = await clientB.stateUpdates(for: session)
            let seen = Task { () -> Double? in
                for await state in updates where state == .federated { return monotonicSeconds() }
                return nil
            }
            let start = monotonicSeconds()
            _ = try await clientA.federate(token: opaqueToken, provider: .facebook, session: session)
            let federated = monotonicSeconds()
            let watchdog = Task {
                try await Task.sleep(for: .seconds(10))
                seen.cancel()
            }
            guard let arrived = await seen.value else { fatalError("client B never saw \(session) federated") }
            watchdog.cancel()
            if index >= warmup {
                federateMs.append((federated - start) * 1000)
                clientDelayMs.append((arrived - start) * 1000)
            }
            if pauseMs > 0 { try await Task.sleep(for: .milliseconds(pauseMs)) }
        }
        await clientA.shutdown()
        await clientB.shutdown()
        await writer.close()
        await reader.close()
        print("commit_ms_median \(fixed(3, median(commitMs)))")
        print("event_ms_median \(fixed(3, median(delayMs)))")
        print("event_ms_p99 \(fixed(3, percentile99(delayMs)))")
        print("federate_ms_median \(fixed(3, median(federateMs)))")
        print("client_event_ms_median \(fixed(3, median(clientDelayMs)))")
        print("client_event_ms_p99 \(fixed(3, percentile99(clientDelayMs)))")
        print(fixed(3, median(delayMs)))
    }

    /// The nearest-rank 99th percentile.
    private func percentile99(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int((Double(sorted.count) * 0.99).rounded(.up)) - 1)]
    }
}

struct RecordBytes: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record-bytes", abstract: "Bytes of one sealed stored session (what the durability floors write).")

    @Option(help: "The canned Cognito endpoint (federates the one session measured).") var endpoint: String

    func run() async throws {
        print(try await sealedSessionSize(endpoint: endpoint))
    }
}

/// When each key reached the reading instance.
final class Arrivals: Sendable {
    private let times = Mutex<[String: Double]>([:])

    func record(_ key: String, at time: Double) {
        times.withLock { if $0[key] == nil { $0[key] = time } }
    }

    func time(of key: String) -> Double? {
        times.withLock { $0[key] }
    }
}
