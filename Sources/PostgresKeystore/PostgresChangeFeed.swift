import Logging
import PostgresNIO
import SecureStorage
import Synchronization

/// The keystore's change feed over `LISTEN`/`NOTIFY`.
///
/// Every commit `NOTIFY`s in its own transaction with a payload naming the namespace, the
/// committing instance's random origin and the changed keys (or `*`, every key, when they do
/// not fit PostgreSQL's 8,000-byte payload limit); see
/// ``PostgresNamespace/notification(origin:keys:)``. PostgreSQL delivers notifications after
/// commit, in commit order, so the payload is all the feed needs: no change log is read.
/// This instance's own commits go to its subscribers at once, without the database. While
/// anyone is subscribed, a listener holds one pooled connection with `LISTEN` and reports
/// other origins' keys of this namespace.
///
/// Each time the listener starts listening (the first time as well as after its connection
/// dropped: server restart, network failure) every subscriber gets ``KeystoreChange/all``,
/// since commits made while nobody listened are not replayed: they are reloaded. Reconnects
/// come with a growing pause (at most ``PostgresKeystore/Configuration/reconnectDelay``). A
/// stream whose buffer overflows also gets ``KeystoreChange/all``.
final class PostgresChangeFeed: Sendable {
    private let subscribers: ChangeFanOut
    private let client: PostgresClient
    private let namespace: PostgresNamespace
    private let origin: Int64
    private let configuration: PostgresKeystore.Configuration
    private let logger: Logger
    private let listening = Atomic<Bool>(false)

    init(
        client: PostgresClient, namespace: PostgresNamespace, origin: Int64,
        configuration: PostgresKeystore.Configuration, logger: Logger
    ) {
        self.client = client
        self.namespace = namespace
        self.origin = origin
        self.configuration = configuration
        self.logger = logger
        self.subscribers = ChangeFanOut(bufferSize: max(2, configuration.changeBufferSize))
    }

    /// Whether the listener currently holds a connection with `LISTEN` active (for tests).
    var isListening: Bool { listening.load(ordering: .acquiring) }

    func subscribe() -> AsyncStream<KeystoreChange> {
        subscribers.subscribe {
            let listener = Task { [weak self] in await self?.listen() }
            return { listener.cancel() }
        }
    }

    /// Delivers this instance's own committed keys at once.
    func deliverLocal(_ keys: [String]) {
        subscribers.deliver(keys.map { .item($0) })
    }

    /// Ends every stream and stops the listener.
    func close() {
        subscribers.close()
    }

    // MARK: Listener

    /// Listens until cancelled, reconnecting after every failure.
    private func listen() async {
        var pause: Duration = .milliseconds(50)
        var reconnecting = false
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: PostgresSchema.channel) { notifications in
                        self.listening.store(true, ordering: .releasing)
                        pause = .milliseconds(50)
                        // What was committed while nobody listened is reloaded, not replayed.
                        self.subscribers.deliver([.all])
                        if reconnecting {
                            self.logger.debug("keystore change feed reconnected", metadata: ["broker.endpoint": "\(self.configuration.endpoint)"])
                        }
                        for try await notification in notifications {
                            self.received(notification.payload)
                        }
                    }
                }
            } catch {
                logger.debug("keystore change feed lost its connection", metadata: [
                    "broker.endpoint": "\(configuration.endpoint)",
                    "broker.error": "\(KeystoreError.postgres(error, operation: "listening", configuration: configuration).reason)",
                ])
            }
            listening.store(false, ordering: .releasing)
            guard !Task.isCancelled else { return }
            reconnecting = true
            try? await Task.sleep(for: pause)
            pause = min(pause * 2, configuration.reconnectDelay)
        }
    }

    /// Delivers another origin's keys of this namespace; ignores everything else.
    private func received(_ payload: String) {
        guard let (sender, keys) = namespace.parseNotification(payload), sender != origin else { return }
        guard let keys else { return subscribers.deliver([.all]) }
        var seen: Set<String> = []
        subscribers.deliver(keys.filter { seen.insert($0).inserted }.map { .item($0) })
    }
}
