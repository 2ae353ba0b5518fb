public import Federation
import Hummingbird
import HummingbirdCore
import NIOCore
public import Logging
public import ServiceLifecycle

/// A loopback HTTP server that hands one or more sessions of a ``FederationClient`` to
/// child processes, as the AWS SDKs' container credential provider expects.
///
/// ```swift
/// let server = try CredentialServer(client: client, configuration: .init(session: "alice"), logger: logger)
/// async let serving: Void = server.run()
/// let endpoint = try await server.endpoint(for: "alice")
/// // start the child with endpoint.childEnvironment(from: environment)
/// …
/// await server.shutdown()
/// try await serving
/// ```
///
/// - It listens on 127.0.0.1 only, on a port the system picks; ``endpoint(for:)`` tells
///   the URL once it listens.
/// - Every request must carry the token of the session it asks for
///   (``authorizationToken(for:)``: 256 random bits, one per session, so that a child handed
///   one session's endpoint cannot read another's) in its `Authorization` header, compared in
///   constant time; a missing header gets 401 and a token of no session 403, with a fixed
///   body and nothing else, and a session's token on another path 404, as for a session not
///   served.
/// - `GET /credentials/<session>` answers with the session's credentials as the keystore
///   holds them at that moment, so a token pushed by any process sharing the store is
///   served at once, and an expired, cleared, never federated or terminated session is
///   refused (404 or 410 with a `{"code", "message"}` body), never answered with old
///   credentials. Nothing is refreshed.
/// - It logs through the caller's logger at debug level (session, status, error code),
///   never the token or a credential.
///
/// It is a swift-service-lifecycle `Service`: run it in a `ServiceGroup` for signal
/// handling and graceful shutdown, or call ``run()`` and ``shutdown()`` yourself. A server
/// runs once.
public final class CredentialServer: Service, Sendable {
    /// Connections kept open at once: one more closes the oldest that has no request in
    /// progress (one that has sent none yet, or a kept-alive one whose answer was written;
    /// ``ConnectionRoster``), so that silent connections cannot crowd out the child's.
    static let maximumConnections = 256
    /// Connections accepted at once, however briefly: past it the server accepts no more
    /// until one closes, so a local user opening connections cannot run the process out of
    /// file descriptors (SwiftNIO would then retry `accept` in a busy loop).
    static let maximumAcceptedConnections = 320

    /// The sessions served.
    public let sessions: [String]
    /// Each session's token, which requests for it must present.
    private let tokens: [String: CredentialServerToken]

    private let logger: Logger
    private let state = ListeningState()
    private let group: ServiceGroup

    /// Creates a server for `configuration`'s sessions of `client`; nothing listens
    /// before ``run()``.
    ///
    /// - Parameters:
    ///   - client: where the sessions are read, at every request. A client made with
    ///     ``FederationClient/init(keystore:expiryMargin:sessionCacheCapacity:logger:)``
    ///     is enough: the server never federates.
    ///   - configuration: the sessions to serve.
    ///   - logger: where to log, at debug level (each request's session and status, the
    ///     listening address); nothing is logged when `nil`. Never a secret.
    /// - Throws: ``CredentialServerError/Code/invalidConfiguration`` for no session, a
    ///   name that breaks ``SessionName``'s rule, or an `idleTimeout` or
    ///   `gracefulShutdownLimit` that is not positive.
    public init(
        client: FederationClient,
        configuration: CredentialServerConfiguration = CredentialServerConfiguration(),
        logger: Logger? = nil
    ) throws(CredentialServerError) {
        guard !configuration.sessions.isEmpty else {
            throw CredentialServerError(code: .invalidConfiguration, message: "the credential server needs at least one session to serve")
        }
        guard configuration.idleTimeout > .zero else {
            throw CredentialServerError(code: .invalidConfiguration, message: "the idle timeout must be longer than zero")
        }
        guard configuration.gracefulShutdownLimit > .zero else {
            throw CredentialServerError(code: .invalidConfiguration, message: "the graceful shutdown limit must be longer than zero")
        }
        for session in configuration.sessions {
            do {
                try SessionName.validate(session)
            } catch {
                throw CredentialServerError(code: .invalidConfiguration, message: error.message)
            }
        }
        let logger = logger ?? Logger(label: "identity-broker.credential-server", factory: { _ in SwiftLogNoOpLogHandler() })
        var unique = [String]()
        for session in configuration.sessions where !unique.contains(session) { unique.append(session) }
        let tokens = Dictionary(uniqueKeysWithValues: unique.map { ($0, CredentialServerToken.random()) })
        sessions = unique
        self.tokens = tokens
        self.logger = logger
        let responder = CredentialResponder(client: client, tokens: tokens, logger: logger)
        let roster = ConnectionRoster(limit: Self.maximumConnections, logger: logger)
        let idleTimeout = configuration.idleTimeout
        let application = Application(
            responder: responder,
            server: HTTPServerBuilder { respond in
                CredentialHTTPChannel(responder: respond, idleTimeout: idleTimeout, roster: roster)
            },
            configuration: ApplicationConfiguration(
                address: .hostname("127.0.0.1", port: 0),
                availableConnectionsDelegate: MaximumAvailableConnections(Self.maximumAcceptedConnections, logger: logger)),
            onServerRunning: { [state, logger] channel in
                guard let port = channel.localAddress?.port else { return }
                logger.debug("credential server listening", metadata: ["broker.address": "127.0.0.1:\(port)"])
                state.listening(port: port)
            },
            logger: logger
        )
        var groupConfiguration = ServiceGroupConfiguration(services: [application], logger: logger)
        groupConfiguration.maximumGracefulShutdownDuration = configuration.gracefulShutdownLimit
        group = ServiceGroup(configuration: groupConfiguration)
    }

    /// Listens and serves until ``shutdown()``, a graceful shutdown of the `ServiceGroup`
    /// running it, or cancellation of the calling task; then stops accepting connections,
    /// lets requests in flight finish (cancelling those still running after the
    /// configuration's ``CredentialServerConfiguration/gracefulShutdownLimit``) and returns.
    ///
    /// - Throws: ``CredentialServerError/Code/serverFailed`` when the socket cannot be bound
    ///   or the server fails; ``CredentialServerError/Code/alreadyRan`` on a second call.
    public func run() async throws(CredentialServerError) {
        guard state.start() else {
            throw CredentialServerError(code: .alreadyRan, message: "a credential server runs once; create another")
        }
        defer { state.stopped() }
        do {
            try await group.run()
        } catch {
            // NIO's I/O errors name the system call and its errno; no request data is in them.
            throw CredentialServerError(code: .serverFailed, message: "the credential server on 127.0.0.1 failed: \(error)")
        }
        logger.debug("credential server stopped")
    }

    /// Stops the server gracefully: ``run()`` returns once requests in flight are answered;
    /// those still running after ``CredentialServerConfiguration/gracefulShutdownLimit``
    /// are cancelled.
    /// Returns at once, without waiting for that. Before ``run()``, the server stops as
    /// soon as it starts.
    public func shutdown() async {
        await group.triggerGracefulShutdown()
    }

    /// The base URL once the server listens, e.g. `http://127.0.0.1:43127`; waits for it.
    ///
    /// - Throws: ``CredentialServerError/Code/notRunning`` when the server stopped or could
    ///   not listen.
    public func baseURL() async throws(CredentialServerError) -> String {
        "http://127.0.0.1:\(try await state.port())"
    }

    /// The token requests for `session` must present: hand its value only to the child
    /// that is to read `session` (``endpoint(for:)`` carries it too). Each session served has
    /// its own, so a child holding one session's token can read no other session.
    ///
    /// - Throws: ``CredentialServerError/Code/sessionNotServed`` for a session not in the
    ///   configuration.
    public func authorizationToken(for session: String = FederationClient.defaultSession) throws(CredentialServerError) -> CredentialServerToken {
        guard let token = tokens[session] else {
            throw CredentialServerError(code: .sessionNotServed, message: "session '\(session)' is not served by this credential server")
        }
        return token
    }

    /// Where `session` is served, once the server listens; waits for it.
    ///
    /// - Throws: ``CredentialServerError/Code/sessionNotServed`` for a session not in the
    ///   configuration; ``CredentialServerError/Code/notRunning`` when the server stopped
    ///   or could not listen.
    public func endpoint(for session: String = FederationClient.defaultSession) async throws(CredentialServerError) -> CredentialEndpoint {
        let token = try authorizationToken(for: session)
        let base = try await baseURL()
        return CredentialEndpoint(session: session, url: base + CredentialResponder.pathPrefix + session, authorizationToken: token)
    }
}
