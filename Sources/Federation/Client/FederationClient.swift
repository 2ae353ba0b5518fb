#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import SecureStorage

/// Swaps end users' identity-provider tokens for Cognito identity IDs and
/// temporary AWS credentials, one named session per end user.
///
/// ```swift
/// let keystore = try SQLiteKeystore(root: "/var/lib/my-tool/identity-broker", service: "my-tool")
/// let client = try FederationClient(configuration: .init(identityPoolId: poolId), keystore: keystore, logger: logger)
/// let result = try await client.federate(token: idToken, provider: .google, session: "alice")
/// let credentials = try await client.credentials(for: "alice")   // throws when not federated
/// ```
///
/// The keystore is the source of truth and the client a bounded cache over it: a
/// session is read on first use (creating a client reads nothing), kept in an LRU cache
/// of ``FederationConfiguration/sessionCacheCapacity`` sessions, and kept current from
/// the keystore's change feed, so every client sharing a store (in this process, other
/// processes, or other hosts) sees the same sessions and reports each other's changes
/// on its state streams. Without a keystore, sessions live in this client's memory.
///
/// There is no automatic refresh: when credentials pass their expiration minus the
/// expiry margin the session reads as ``SessionState/expired`` and observers are told;
/// the caller pushes a new provider token with ``federate(token:provider:options:session:)``.
///
/// Sessions are independent: federations of different sessions run concurrently (and
/// share the store's commits), federations of one session are serialised, reads never
/// wait for a commit, and a failed call leaves the previous session as it was. Two
/// clients federating one session at once converge on the record with the later
/// expiration; no lock is held across a network call.
public actor FederationClient {
    /// The session name used when none is given.
    public static let defaultSession = "default"

    /// The configuration this client federates with; `nil` for a client made with
    /// ``init(keystore:expiryMargin:sessionCacheCapacity:logger:)``, which only reads,
    /// observes and clears saved sessions.
    public nonisolated let configuration: FederationConfiguration?

    let cognito: CognitoIdentityClient?
    let store: SessionStore
    let expiryMargin: Duration
    let federationTimeout: Duration
    let logger: Logger
    let now: @Sendable () -> Date
    let broadcaster = StateBroadcaster()

    var cache: LRUCache<CachedSession>
    var locks = SessionLockTable()
    var expirySchedule = DueSchedule()
    var expiryTimer: Task<Void, Never>?
    var expiryTimerDue: Date?
    var changeFeed: Task<Void, Never>?
    var nextGeneration: UInt64 = 0

    /// Creates a client that federates with `configuration` and keeps sessions in
    /// `keystore`, or in its own memory when `keystore` is `nil`.
    ///
    /// Nothing is read from the keystore here: sessions are read when first used.
    ///
    /// - Parameters:
    ///   - configuration: the pool, endpoint, timeouts, margins and cache size.
    ///   - keystore: where sessions live; share one store between clients, processes or
    ///     hosts to share sessions. Default: this client's memory only.
    ///   - logger: where to log; nothing is logged when `nil`. No level ever shows a secret.
    /// - Throws: ``FederationError/Code/invalidConfiguration`` when the pool ID,
    ///   region or endpoint is unusable.
    public init(configuration: FederationConfiguration, keystore: (any Keystore)? = nil, logger: Logger? = nil) throws(FederationError) {
        try self.init(
            configuration: configuration,
            transport: CurlTransport.shared,
            keystore: keystore ?? InMemoryKeystore(),
            environment: ProcessInfo.processInfo.environment,
            now: { Date() },
            logger: logger
        )
    }

    /// Creates a client that reads, observes and clears the sessions saved in `keystore`
    /// without a pool configuration: it never reaches the network, and its
    /// ``federate(token:provider:options:session:)`` and ``federateAsGuest(session:)``
    /// fail with ``FederationError/Code/invalidConfiguration``.
    ///
    /// - Parameters:
    ///   - keystore: where the sessions are saved.
    ///   - expiryMargin: credentials read as expired this long before their expiration.
    ///   - sessionCacheCapacity: how many sessions to keep in memory.
    ///   - logger: where to log; nothing is logged when `nil`.
    public init(
        keystore: any Keystore,
        expiryMargin: Duration = .seconds(120),
        sessionCacheCapacity: Int = FederationConfiguration.defaultSessionCacheCapacity,
        logger: Logger? = nil
    ) {
        self.init(
            configuration: nil, cognito: nil, keystore: keystore, expiryMargin: expiryMargin,
            federationTimeout: .seconds(60), sessionCacheCapacity: sessionCacheCapacity, now: { Date() }, logger: logger)
    }

    /// The designated initializer for federating clients, with every collaborator
    /// injectable for tests.
    init(
        configuration: FederationConfiguration,
        transport: any HTTPTransport,
        keystore: any Keystore,
        environment: [String: String],
        retryRunner: RetryRunner? = nil,
        now: @escaping @Sendable () -> Date,
        logger: Logger?
    ) throws(FederationError) {
        let cognito = try CognitoIdentityClient(
            configuration: configuration, transport: transport, environment: environment, retryRunner: retryRunner)
        self.init(
            configuration: configuration, cognito: cognito, keystore: keystore, expiryMargin: configuration.expiryMargin,
            federationTimeout: configuration.federationTimeout, sessionCacheCapacity: configuration.sessionCacheCapacity,
            now: now, logger: logger)
    }

    private init(
        configuration: FederationConfiguration?,
        cognito: CognitoIdentityClient?,
        keystore: any Keystore,
        expiryMargin: Duration,
        federationTimeout: Duration,
        sessionCacheCapacity: Int,
        now: @escaping @Sendable () -> Date,
        logger: Logger?
    ) {
        self.configuration = configuration
        self.cognito = cognito
        store = SessionStore(keystore: keystore)
        self.expiryMargin = expiryMargin
        self.federationTimeout = federationTimeout
        cache = LRUCache(capacity: sessionCacheCapacity)
        self.now = now
        self.logger = logger ?? .disabled
    }

    deinit {
        expiryTimer?.cancel()
        changeFeed?.cancel()
        broadcaster.finishAll()
    }

    // MARK: - Federation

    /// Exchanges a provider token for an identity ID and temporary credentials,
    /// and makes them `session`'s, in the keystore and in this client.
    ///
    /// JWT-shaped tokens (Google, Apple, OIDC, developer) are checked locally
    /// first: a malformed one, or one expired more than 5 minutes ago, fails
    /// with ``FederationError/Code/invalidToken`` before any request.
    ///
    /// The identity ID comes from, in order: ``FederationOptions/developerProvidedIdentityId``;
    /// for ``AuthProvider/developer``, the token's `sub` claim (a developer token
    /// never goes to `GetId`); the session's known ID (a guest identity this way
    /// gets the login linked to it); else `GetId`. A known ID the service
    /// rejects is dropped and `GetId` is tried once.
    ///
    /// Returns only after the session is committed to the keystore. When another client
    /// stored the session with a later expiration meanwhile, that record is kept (the
    /// result returned here is still valid).
    ///
    /// - Parameters:
    ///   - token: the provider's token; it is sent to the service and never stored or logged.
    ///   - provider: who issued `token`.
    ///   - options: a developer-provided identity ID and a custom role ARN.
    ///   - session: the end user's session name (see ``SessionName``).
    /// - Returns: the identity ID and credentials.
    /// - Throws: ``FederationError``; the session is then as it was before the call,
    ///   except that an answer saying the identity is gone makes it ``SessionState/terminated``.
    ///   ``FederationError/Code/storage`` when the keystore cannot be reached.
    @discardableResult
    public func federate(
        token: String,
        provider: AuthProvider,
        options: FederationOptions = FederationOptions(),
        session: String = FederationClient.defaultSession
    ) async throws(FederationError) -> FederationResult {
        try SessionName.validate(session)
        let (cognito, configuration) = try federatingParts()
        guard !token.isEmpty else {
            throw FederationError(code: .invalidToken, message: "the provider token is empty")
        }
        var tokenSubject: String?
        if provider.issuesJWT, provider != .developer || options.developerProvidedIdentityId == nil {
            let jwt = try JSONWebToken(parsing: token)
            try jwt.checkNotExpired(now: now())
            tokenSubject = jwt.subject
        }
        let logins = [provider.loginsKey: token]
        return try await exchange(session: session, operationName: "federate", provider: provider.identifier) { (previous) throws(FederationError) -> IdentityChoice in
            if let id = options.developerProvidedIdentityId {
                return (id, cached: false)
            }
            if provider == .developer {
                guard let subject = tokenSubject, !subject.isEmpty else {
                    throw FederationError(
                        code: .invalidToken,
                        message: "the developer token has no 'sub' claim; pass the identity ID your backend received (developerProvidedIdentityId)"
                    )
                }
                return (subject, cached: false)
            }
            return (previous?.identityId, cached: previous?.identityId != nil)
        } credentials: { (identityId, deadline, logger) async throws(FederationError) -> FederationResult in
            try await cognito.getCredentialsForIdentity(
                identityId: identityId, logins: logins, customRoleArn: options.customRoleArn, deadline: deadline, logger: logger)
        } identity: { (deadline, logger) async throws(FederationError) -> String in
            try await cognito.getId(
                identityPoolId: configuration.identityPoolId, accountId: configuration.accountId,
                logins: logins, deadline: deadline, logger: logger)
        }
    }

    /// Gets credentials for an unauthenticated (guest) identity for `session`,
    /// reusing the session's guest identity ID when it has one.
    ///
    /// A later ``federate(token:provider:options:session:)`` of the same session
    /// links the login to this identity, keeping its ID.
    ///
    /// - Throws: ``FederationError/Code/sessionConflict`` when the session holds an
    ///   authenticated identity (clear it first); otherwise as ``federate(token:provider:options:session:)``.
    @discardableResult
    public func federateAsGuest(session: String = FederationClient.defaultSession) async throws(FederationError) -> FederationResult {
        try SessionName.validate(session)
        let (cognito, configuration) = try federatingParts()
        return try await exchange(session: session, operationName: "guest", provider: nil) { (previous) throws(FederationError) -> IdentityChoice in
            guard let previous else { return (nil, cached: false) }
            guard previous.provider == nil else {
                throw FederationError(
                    code: .sessionConflict,
                    message: "session '\(session)' holds an authenticated identity; a guest identity would replace it, so clear the session first"
                )
            }
            guard previous.isGuest, let id = previous.identityId else { return (nil, cached: false) }
            return (id, cached: true)
        } credentials: { (identityId, deadline, logger) async throws(FederationError) -> FederationResult in
            try await cognito.getCredentialsForIdentity(
                identityId: identityId, logins: nil, customRoleArn: nil, deadline: deadline, logger: logger)
        } identity: { (deadline, logger) async throws(FederationError) -> String in
            try await cognito.getId(
                identityPoolId: configuration.identityPoolId, accountId: configuration.accountId,
                logins: nil, deadline: deadline, logger: logger)
        }
    }

    // MARK: - Reading and clearing

    /// The session as it stands now: its state, and its credentials only when federated.
    ///
    /// Served from the cache when the session is there (never waiting for a commit in
    /// flight), else read from the keystore once.
    ///
    /// - Throws: ``FederationError/Code/invalidConfiguration`` for a name that breaks
    ///   ``SessionName``'s rule; ``FederationError/Code/storage`` when the session is not
    ///   cached and its saved item cannot be read (damaged, wrong key: this session only)
    ///   or the keystore cannot be reached.
    public func session(_ name: String = FederationClient.defaultSession) async throws(FederationError) -> SessionSnapshot {
        try SessionName.validate(name)
        let machine = try await cachedOrLoaded(name)
        return snapshot(name, machine)
    }

    /// The session's credentials, when it has valid ones.
    ///
    /// Valid credentials stay readable while a new federation of the session is in flight.
    ///
    /// - Throws: ``FederationError/Code/noValidCredentials`` when the session has none
    ///   or they expired (push a new token); ``FederationError/Code/identityTerminated``
    ///   when the service said the identity is gone; otherwise as ``session(_:)``.
    public func credentials(for session: String = FederationClient.defaultSession) async throws(FederationError) -> AWSCredentials {
        try SessionName.validate(session)
        let machine = try await cachedOrLoaded(session)
        switch machine.record?.phase {
        case .terminated:
            throw FederationError(
                code: .identityTerminated,
                message: "session '\(session)' is terminated: the service said its identity is gone; clear the session, then federate again")
        case .federated:
            if let credentials = machine.record?.credentials, !credentials.isExpired(at: now(), margin: expiryMargin) {
                return credentials
            }
            throw FederationError(code: .noValidCredentials, message: "the credentials of session '\(session)' expired; push a new provider token")
        case nil:
            throw FederationError(code: .noValidCredentials, message: "session '\(session)' has no credentials; federate it first")
        }
    }

    /// The names of every saved session, sorted (read from the keystore).
    public func sessionNames() async throws(FederationError) -> [String] {
        try await store.names()
    }

    /// Forgets `session`: in the keystore (every client sharing it sees
    /// ``SessionState/notFederated``) and here. Waits for a federation of the session in
    /// flight in this client to finish first. A damaged saved item is removed too.
    ///
    /// - Throws: ``FederationError/Code/invalidConfiguration`` for a name that breaks
    ///   ``SessionName``'s rule; ``FederationError/Code/storage`` when the saved session
    ///   could not be removed; the session is then kept.
    public func clear(session: String = FederationClient.defaultSession) async throws(FederationError) {
        try SessionName.validate(session)
        await acquire(session)
        defer { release(session) }
        try await store.remove(session)
        apply(session) { machine, now, margin in machine.stored(nil, now: now, margin: margin) }
        logger.debug("session cleared", metadata: ["broker.session": "\(session)"])
    }

    // MARK: - Observing

    /// A stream of `session`'s states: the current one first, then every change, made
    /// by this client or by any other sharing its keystore.
    ///
    /// Expiry is announced when it happens, whether or not anyone reads the
    /// session. The stream ends when the client is released.
    public func stateUpdates(for session: String = FederationClient.defaultSession) async -> AsyncStream<SessionState> {
        startChangeFeed()
        var current = SessionState.notFederated
        do {
            current = try await cachedOrLoaded(session).state(now: now(), margin: expiryMargin)
        } catch {
            logger.debug("observed session unreadable", metadata: ["broker.session": "\(session)", "broker.error": "\(error.code)"])
        }
        return broadcaster.stream(for: session, current: current)
    }

    /// A stream of every state change from now on: of the sessions this client holds,
    /// and of any session another client sharing the keystore changes.
    public func allStateUpdates() -> AsyncStream<SessionEvent> {
        startChangeFeed()
        announceDueExpiries()
        return broadcaster.streamForAll()
    }
}
