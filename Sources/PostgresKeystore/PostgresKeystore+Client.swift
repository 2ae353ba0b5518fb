import Logging
import PostgresNIO
import SecureStorage

extension PostgresKeystore {
    /// NIOSSL's settings for the TLS mode, or `nil` for ``TLSMode/disable``.
    static func tlsSettings(_ configuration: Configuration) -> TLSConfiguration? {
        guard configuration.tls != .disable else { return nil }
        var settings = TLSConfiguration.makeClientConfiguration()
        // As libpq: `require` with a root certificate file checks the certificate (verify-ca).
        let checksCertificate = configuration.tls.verifiesCertificate
            || (configuration.tls == .require && configuration.rootCertificatePath != nil)
        if !checksCertificate {
            settings.certificateVerification = .none
        } else if !configuration.tls.verifiesHostName {
            settings.certificateVerification = .noHostnameVerification
        }
        if let roots = configuration.rootCertificatePath {
            settings.trustRoots = .file(roots)
        }
        return settings
    }

    /// Sent when a connection starts (postgres-nio sends only the user and the database):
    /// - `client_encoding` UTF-8, which Swift strings are: without it the server takes the
    ///   database's encoding, and in a `LATIN1` database stored every byte of a non-ASCII key
    ///   as a character of its own (other clients read another key).
    /// - `application_name`, so an administrator can tell the keystore's connections apart in
    ///   `pg_stat_activity` and the server's log.
    ///
    /// Both are parameters connection poolers such as PgBouncer pass on.
    static let startupParameters = [("client_encoding", "UTF8"), ("application_name", "identity-broker")]

    /// postgres-nio's client configuration for ours: TCP, TLS as the mode asks, pool size
    /// (at least 2: the change feed holds one connection while subscribed), timeouts and
    /// keep-alive (off unless asked for: see ``Configuration/keepAliveInterval``).
    static func clientConfiguration(_ configuration: Configuration) -> PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS
        if let settings = tlsSettings(configuration) {
            tls = configuration.tls.isRequired ? .require(settings) : .prefer(settings)
        } else {
            tls = .disable
        }
        var client = PostgresClient.Configuration(
            host: configuration.host, port: configuration.port, username: configuration.username,
            password: configuration.password, database: configuration.database, tls: tls)
        client.options.connectTimeout = configuration.connectTimeout
        client.options.additionalStartupParameters = startupParameters
        // Every time a connection above the minimum goes idle, the pool starts an idle-timeout
        // timer (a task group of two tasks and a `Task.sleep`), and cancels it at the next
        // lease: at low concurrency that is once per operation. Two kept connections (the
        // default: the change feed's and one for operations) serve a lone caller with no such timer.
        client.options.minimumConnections = configuration.poolMinimum
        client.options.maximumConnections = configuration.poolSize
        // postgres-nio's default keep-alive starts a timer (a task group of two tasks) each
        // time a connection is released and cancels it at the next lease: at concurrency 1,
        // ~14 of a durable federation's 23 hand-offs to the global executor.
        client.options.keepAliveBehavior = configuration.keepAliveInterval.map { .init(frequency: $0) }
        return client
    }

    /// Opens one connection outside the pool; throws a ``KeystoreError`` when TLS cannot be
    /// set up, otherwise what postgres-nio threw.
    static func connect(_ configuration: Configuration, logger: Logger) async throws -> PostgresConnection {
        let tls: PostgresConnection.Configuration.TLS
        do {
            if let settings = tlsSettings(configuration) {
                let context = try NIOSSLContext(configuration: settings)
                tls = configuration.tls.isRequired ? .require(context) : .prefer(context)
            } else {
                tls = .disable
            }
        } catch {
            throw KeystoreError(
                .storeUnavailable, "PostgreSQL at \(configuration.endpoint): TLS could not be set up: \(error)",
                path: configuration.endpoint)
        }
        var connection = PostgresConnection.Configuration(
            host: configuration.host, port: configuration.port, username: configuration.username,
            password: configuration.password, database: configuration.database, tls: tls)
        let timeout = configuration.connectTimeout.components
        connection.options.connectTimeout = .nanoseconds(timeout.seconds * 1_000_000_000 + timeout.attoseconds / 1_000_000_000)
        connection.options.additionalStartupParameters = startupParameters
        // postgres-nio logs every protocol message at trace level, the SCRAM exchange among
        // them (enough for an offline guess at the password): a trace logger gets none of this
        // connection's messages. (Not a copy set to debug: the caller's handler may be a class,
        // whose level that would change for the caller too.)
        let connectLogger = logger.logLevel < .debug
            ? Logger(label: logger.label, factory: { _ in SwiftLogNoOpLogHandler() })
            : logger
        return try await PostgresConnection.connect(configuration: connection, id: 0, logger: connectLogger)
    }

    /// The error of an operation that ran out of time.
    static func timeout(_ operation: String, _ configuration: Configuration) -> KeystoreError {
        KeystoreError(
            .storeUnavailable,
            "PostgreSQL at \(configuration.endpoint): \(operation) did not complete within \(configuration.operationTimeout) (the server is unreachable or overloaded)",
            path: configuration.endpoint)
    }

    /// Runs `body` on a pooled connection within ``Configuration/operationTimeout``, mapping
    /// every failure to a ``KeystoreError``; the connection of an operation that runs out of
    /// time is closed. A connection found dead before anything was
    /// committed is replaced and `body` runs again, at most once per pooled connection: a
    /// server restart can leave several that the pool has not yet seen closed.
    func perform<T: Sendable>(
        _ operation: String,
        _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T
    ) async throws(KeystoreError) -> T {
        guard !isClosed else {
            throw KeystoreError(.storeUnavailable, "the keystore is closed", path: configuration.endpoint)
        }
        return try await Self.perform(operation, pool: pool, deadlines: deadlines, logger: logger, body)
    }

    /// - Parameters:
    ///   - cancellable: `false` for a group done on behalf of several callers, which one
    ///     caller's cancellation must not fail for the others.
    ///   - probing: `true` for the change feed's heartbeat, whose failures tell the pool
    ///     nothing (the feed checks its own connection then): it reports no trouble and does
    ///     not hold a connection against the pool's replacement, so that outages are handled
    ///     as they would be without it.
    static func perform<T: Sendable>(
        _ operation: String,
        pool: PostgresPool,
        deadlines: DeadlineQueue,
        cancellable: Bool = true,
        probing: Bool = false,
        logger: Logger,
        _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T
    ) async throws(KeystoreError) -> T {
        let configuration = pool.configuration
        // Set before the operation is cancelled at its deadline: a wait for a connection that
        // ends there is trouble, one its caller ends is not.
        let timedOut = Flag()
        return try await OperationDeadline.run(deadlines, cancellable: cancellable, onTimeout: {
            timedOut.set()
            return timeout(operation, configuration)
        }) {
            () throws(KeystoreError) -> T in
            var attempt = 0
            while true {
                attempt += 1
                let generation = pool.current
                let leased = Flag()
                let servedBefore = pool.servedSoFar
                // A call made already cancelled never waits: it says nothing about the pool.
                let cancelledAtStart = Task.isCancelled
                do {
                    return try await pool.withConnection(on: generation, holding: !probing) { connection in
                        leased.set()
                        return try await run(body, on: connection, setup: generation.setup, configuration: configuration, logger: logger)
                    }
                } catch let error as CommitOutcomeUnknown {
                    if !probing { pool.reportTrouble(on: generation) }
                    let mapped = KeystoreError.postgres(
                        error.underlying, operation: "\(operation) (the connection was lost while committing: the outcome is unknown)",
                        configuration: configuration)
                    // Never `io`, which a group takes as "nothing applied" and retries batch by batch.
                    throw mapped.code == .storeUnavailable ? mapped : KeystoreError(.storeUnavailable, mapped.reason, path: mapped.path)
                } catch {
                    // A replaced pool fails the calls still waiting for its connections when
                    // it shuts down: they run on the new one (nothing of theirs was sent).
                    if !Task.isCancelled && !leased.isSet && pool.wasReplaced(generation) {
                        attempt -= 1
                        continue
                    }
                    if attempt <= configuration.poolSize && !Task.isCancelled
                        && KeystoreError.isRetryableConnectionLoss(error) { continue }
                    let mapped = KeystoreError.postgres(error, operation: operation, configuration: configuration)
                    // No connection to be had (the deadline cancels the wait), or connections
                    // that keep dying: the pool watches for the server. Not a statement the
                    // server refused or cancelled on a working connection, nor a wait the
                    // caller gave up while the pool was busy; one it gave up on a pool that
                    // handed out nothing and held nothing meanwhile counts (callers that all
                    // give up sooner than the reconnect delay would otherwise leave a pool in
                    // postgres-nio's backoff for as long as it lasts). The two counters are
                    // read apart: at worst one needless watch, which checks them again.
                    let callerCancelled = Task.isCancelled && !timedOut.isSet
                    let troubled = !callerCancelled
                        || (!cancelledAtStart && !leased.isSet && pool.isIdle(generation, since: servedBefore))
                    if mapped.code == .storeUnavailable && troubled && !probing
                        && (!leased.isSet || KeystoreError.isRetryableConnectionLoss(error)) {
                        pool.reportTrouble(on: generation)
                    }
                    throw mapped
                }
            }
        }
    }

    /// Runs `body` on a leased connection, set up on its first use; closes the connection
    /// when the operation is cancelled or times out and its statement is still unanswered a
    /// whole operation timeout later.
    private static func run<T: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T,
        on connection: PostgresConnection,
        setup: ConnectionSetup,
        configuration: Configuration,
        logger: Logger
    ) async throws -> T {
        let done = Flag()
        defer { done.set() }
        do {
            return try await withTaskCancellationHandler {
                try await setup.prepare(connection, logger: logger)
                // The set-up sends nothing on a connection used before, and
                // `body`'s statements are not checked (`runUnlessClosed`).
                guard !connection.isClosed else { throw StaleConnection() }
                return try await ConnectionSetup.$current.withValue(.init(setup: setup, connection: connection.id)) {
                    try await body(connection, logger)
                }
            } onCancel: {
                // Past its deadline (or cancelled by its caller), a statement on a
                // connection that carries nothing more (a dropped flow gives no
                // error) would hold it for good. A live server ends any statement
                // within the timeout (statement_timeout), so one still unanswered a
                // whole timeout later is on a dead flow: closed, the pool replaces
                // it. Closing at once would churn connections on a merely slow server.
                Task {
                    try? await Task.sleep(for: configuration.operationTimeout)
                    guard !done.isSet else { return }
                    let closing: EventLoopFuture<Void> = connection.close()
                    _ = closing
                }
            }
        } catch {
            // The pool learns that a connection closed from its close future,
            // on the connection's event loop, after the failed statement was
            // already reported here. Run again before that, and the pool can
            // hand back the same dead connection, each attempt in turn (seen
            // in CI: every attempt used up in microseconds on a busy machine).
            if connection.isClosed { try? await connection.closeFuture.get() }
            if KeystoreError.isReadOnlyServer(error) {
                // The connection keeps the read-only setting it started with, or its standby: a
                // new one sees the server as it is now (a role reset, a failover's new primary).
                try? await connection.close()
            }
            throw error
        }
    }
}
