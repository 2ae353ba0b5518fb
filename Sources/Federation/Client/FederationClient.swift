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
/// let client = try FederationClient(configuration: .init(identityPoolId: poolId), logger: logger)
/// let result = try await client.federate(token: idToken, provider: .google, session: "alice")
/// let snapshot = await client.session("alice")   // state, and credentials when federated
/// ```
///
/// There is no automatic refresh: when credentials pass their expiration minus
/// ``FederationConfiguration/expiryMargin`` the session reads as
/// ``SessionState/expired`` and observers are told; the caller pushes a new
/// provider token with ``federate(token:provider:options:session:)``.
///
/// Sessions are independent: federations of different sessions run
/// concurrently, federations of one session are serialised, and a failed call
/// leaves the previous session as it was.
public actor FederationClient {
    /// The session name used when none is given.
    public static let defaultSession = "default"

    /// The configuration this client was created with.
    public nonisolated let configuration: FederationConfiguration

    private let cognito: CognitoIdentityClient
    private let persistence: (any SessionPersistence)?
    private let logger: Logger
    private let now: @Sendable () -> Date
    private let broadcaster = StateBroadcaster()

    private var records: [String: SessionRecord]
    private var published: [String: SessionState] = [:]
    private var inFlight: [String: [CheckedContinuation<Void, Never>]] = [:]
    private var federating: Set<String> = []
    private var expiryWatcher: Task<Void, Never>?
    private var expiryWatchDue: Date?

    /// Creates a client that keeps sessions in memory only.
    ///
    /// - Parameters:
    ///   - configuration: the pool, endpoint, timeouts and margins.
    ///   - logger: where to log; nothing is logged when `nil`. No level ever shows a secret.
    /// - Throws: ``FederationError/Code/invalidConfiguration`` when the pool ID,
    ///   region or endpoint is unusable.
    public init(configuration: FederationConfiguration, logger: Logger? = nil) throws(FederationError) {
        try self.init(
            configuration: configuration,
            transport: CurlTransport.shared,
            persistence: nil,
            environment: ProcessInfo.processInfo.environment,
            now: { Date() },
            logger: logger
        )
    }

    /// Creates a client that saves every session in `keystore` and restores the
    /// saved ones now, into ``SessionState/federated`` or ``SessionState/expired``.
    ///
    /// Each successful federation is written before it becomes the session's
    /// (identity ID, provider, credentials; never the provider token), and
    /// ``clear(session:)`` removes it durably.
    ///
    /// - Throws: ``FederationError/Code/invalidConfiguration`` for an unusable
    ///   configuration; ``FederationError/Code/storage`` when a saved session cannot
    ///   be read (tampered, wrong key, corrupt), with the `KeystoreError` attached.
    public init(configuration: FederationConfiguration, keystore: any SynchronousKeystore, logger: Logger? = nil) throws(FederationError) {
        try self.init(
            configuration: configuration,
            transport: CurlTransport.shared,
            persistence: KeystoreSessionPersistence(keystore: keystore),
            environment: ProcessInfo.processInfo.environment,
            now: { Date() },
            logger: logger
        )
    }

    /// The designated initializer, with every collaborator injectable for tests.
    init(
        configuration: FederationConfiguration,
        transport: any HTTPTransport,
        persistence: (any SessionPersistence)?,
        environment: [String: String],
        retryRunner: RetryRunner? = nil,
        now: @escaping @Sendable () -> Date,
        logger: Logger?
    ) throws(FederationError) {
        self.configuration = configuration
        cognito = try CognitoIdentityClient(
            configuration: configuration, transport: transport, environment: environment, retryRunner: retryRunner)
        self.persistence = persistence
        self.logger = logger ?? .disabled
        self.now = now
        let restored = try persistence?.loadAll() ?? [:]
        if !restored.isEmpty {
            self.logger.debug("restored sessions", metadata: ["broker.count": "\(restored.count)"])
        }
        records = restored
    }

    deinit {
        expiryWatcher?.cancel()
        broadcaster.finishAll()
    }

    // MARK: - Federation

    /// Exchanges a provider token for an identity ID and temporary credentials,
    /// and makes them `session`'s.
    ///
    /// JWT-shaped tokens (Google, Apple, OIDC, developer) are checked locally
    /// first: a malformed one, or one expired more than 5 minutes ago, fails
    /// with ``FederationError/Code/invalidToken`` before any request.
    ///
    /// The identity ID comes from, in order: ``FederationOptions/developerProvidedIdentityId``;
    /// for ``AuthProvider/developer``, the token's `sub` claim (a developer token
    /// never goes to `GetId`); the session's cached ID (a guest identity this way
    /// gets the login linked to it); else `GetId`. A cached ID the service
    /// rejects is dropped and `GetId` is tried once.
    ///
    /// - Parameters:
    ///   - token: the provider's token; it is sent to the service and never stored or logged.
    ///   - provider: who issued `token`.
    ///   - options: a developer-provided identity ID and a custom role ARN.
    ///   - session: the end user's session name.
    /// - Returns: the identity ID and credentials.
    /// - Throws: ``FederationError``; the session is then as it was before the call,
    ///   except that an answer saying the identity is gone makes it ``SessionState/terminated``.
    @discardableResult
    public func federate(
        token: String,
        provider: AuthProvider,
        options: FederationOptions = FederationOptions(),
        session: String = FederationClient.defaultSession
    ) async throws(FederationError) -> FederationResult {
        try SessionName.validate(session)
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
            try await self.cognito.getCredentialsForIdentity(
                identityId: identityId, logins: logins, customRoleArn: options.customRoleArn, deadline: deadline, logger: logger)
        } identity: { (deadline, logger) async throws(FederationError) -> String in
            try await self.cognito.getId(
                identityPoolId: self.configuration.identityPoolId, accountId: self.configuration.accountId,
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
            try await self.cognito.getCredentialsForIdentity(
                identityId: identityId, logins: nil, customRoleArn: nil, deadline: deadline, logger: logger)
        } identity: { (deadline, logger) async throws(FederationError) -> String in
            try await self.cognito.getId(
                identityPoolId: self.configuration.identityPoolId, accountId: self.configuration.accountId,
                logins: nil, deadline: deadline, logger: logger)
        }
    }

    // MARK: - Reading and clearing

    /// The session as it stands now: its state, and its credentials only when federated.
    public func session(_ name: String = FederationClient.defaultSession) -> SessionSnapshot {
        let state = currentState(of: name)
        guard let record = records[name] else { return SessionSnapshot(name: name, state: state) }
        return SessionSnapshot(
            name: name,
            state: state,
            identityId: record.identityId,
            provider: record.provider.flatMap(AuthProvider.init(identifier:)),
            isGuest: record.isGuest,
            credentials: state == .federated ? record.credentials : nil,
            expiration: record.credentials?.expiration
        )
    }

    /// The names of every session this client holds.
    public func sessionNames() -> [String] {
        records.keys.sorted()
    }

    /// Forgets `session`: in memory, and in its keystore when there is one.
    /// Waits for a federation of the session in flight to finish first.
    ///
    /// - Throws: ``FederationError/Code/invalidConfiguration`` for a name that breaks
    ///   ``SessionName``'s rule; ``FederationError/Code/storage`` when the saved session
    ///   could not be removed; the session is then kept.
    public func clear(session: String = FederationClient.defaultSession) async throws(FederationError) {
        try SessionName.validate(session)
        await acquire(session)
        defer { release(session) }
        guard records[session] != nil else { return }
        try persistence?.remove(session: session)
        records[session] = nil
        logger.debug("session cleared", metadata: ["broker.session": "\(session)"])
        publish(.notFederated, session: session)
    }

    /// Removes `session`'s saved item from `keystore` without opening it.
    ///
    /// The way out when a saved session cannot be restored (tampered, or sealed
    /// with another key), which makes ``init(configuration:keystore:logger:)`` fail:
    /// remove it, then create the client again.
    public static func removeSavedSession(_ session: String, from keystore: any SynchronousKeystore) throws(FederationError) {
        try SessionName.validate(session)
        try KeystoreSessionPersistence(keystore: keystore).remove(session: session)
    }

    // MARK: - Observing

    /// A stream of `session`'s states: the current one first, then every change.
    ///
    /// Expiry is announced when it happens, whether or not anyone reads the
    /// session. The stream ends when the client is released.
    public func stateUpdates(for session: String = FederationClient.defaultSession) -> AsyncStream<SessionState> {
        let stream = broadcaster.stream(for: session, current: currentState(of: session))
        scheduleExpiryWatch()
        return stream
    }

    /// A stream of every session's state changes from now on.
    public func allStateUpdates() -> AsyncStream<SessionEvent> {
        let stream = broadcaster.streamForAll()
        scheduleExpiryWatch()
        return stream
    }

    // MARK: - The exchange

    typealias IdentityChoice = (identityId: String?, cached: Bool)

    /// Runs one federation of `session` under its lock, with the state machine
    /// around it: `federating` while in flight, the new record on success, the
    /// previous one on failure, `terminated` when the identity is gone.
    private func exchange(
        session: String,
        operationName: String,
        provider: String?,
        choose: (SessionRecord?) throws(FederationError) -> IdentityChoice,
        credentials: (String, ContinuousClock.Instant, Logger) async throws(FederationError) -> FederationResult,
        identity: (ContinuousClock.Instant, Logger) async throws(FederationError) -> String
    ) async throws(FederationError) -> FederationResult {
        await acquire(session)
        defer { release(session) }
        if Task.isCancelled {
            throw FederationError(code: .cancelled, message: "\(operationName) was cancelled before it started")
        }
        let previous = records[session]
        if previous?.phase == .terminated {
            throw FederationError(
                code: .identityTerminated,
                message: "session '\(session)' is terminated: the service said its identity is gone; clear the session, then federate again"
            )
        }
        let choice = try choose(previous)
        var sessionLogger = logger
        sessionLogger[metadataKey: "broker.session"] = "\(session)"
        sessionLogger.debug("federation started", metadata: ["broker.provider": "\(provider ?? "guest")"])
        federating.insert(session)
        publish(.federating, session: session)
        defer { federating.remove(session) }

        let deadline = ContinuousClock.now.advanced(by: configuration.federationTimeout)
        let result: FederationResult
        do {
            result = try await resolveCredentials(
                choice: choice, credentials: credentials, identity: identity, deadline: deadline, logger: sessionLogger)
        } catch {
            federating.remove(session)
            if Self.meansIdentityGone(error) {
                let terminated = SessionRecord(phase: .terminated, identityId: choice.identityId ?? previous?.identityId, provider: provider, credentials: nil)
                try? persistence?.save(terminated, session: session)
                records[session] = terminated
                sessionLogger.debug("federation failed: identity gone", metadata: ["broker.error": "\(error.code)"])
                publish(.terminated, session: session)
                throw FederationError(
                    code: .identityTerminated,
                    message: "the identity service says the identity is gone or disabled; clear the session, then federate again",
                    operation: error.operation,
                    serviceErrorType: error.serviceErrorType,
                    serviceMessage: error.serviceMessage,
                    httpStatus: error.httpStatus
                )
            }
            sessionLogger.debug("federation failed", metadata: ["broker.error": "\(error.code)"])
            publish(currentState(of: session), session: session)
            throw error
        }

        federating.remove(session)
        let record = SessionRecord(phase: .federated, identityId: result.identityId, provider: provider, credentials: result.credentials)
        do {
            try persistence?.save(record, session: session)
        } catch {
            sessionLogger.debug("federation not saved", metadata: ["broker.error": "\(error.code)"])
            publish(currentState(of: session), session: session)
            throw error
        }
        records[session] = record
        sessionLogger.debug(
            "federation succeeded",
            metadata: ["broker.identityId": "\(result.identityId)", "broker.expiration": "\(Int(result.credentials.expiration.timeIntervalSince1970))"]
        )
        publish(currentState(of: session), session: session)
        scheduleExpiryWatch(for: session)
        return result
    }

    /// GetId when needed, then GetCredentialsForIdentity; a cached ID the service
    /// rejects is dropped and GetId tried once.
    private func resolveCredentials(
        choice: IdentityChoice,
        credentials: (String, ContinuousClock.Instant, Logger) async throws(FederationError) -> FederationResult,
        identity: (ContinuousClock.Instant, Logger) async throws(FederationError) -> String,
        deadline: ContinuousClock.Instant,
        logger: Logger
    ) async throws(FederationError) -> FederationResult {
        guard let known = choice.identityId else {
            let identityId = try await identity(deadline, logger)
            return try await credentials(identityId, deadline, logger)
        }
        do {
            return try await credentials(known, deadline, logger)
        } catch where choice.cached && (error.code == .notAuthorized || error.code == .resourceNotFound) {
            logger.debug("cached identity ID rejected; asking GetId once", metadata: ["broker.error": "\(error.code)"])
            let identityId = try await identity(deadline, logger)
            return try await credentials(identityId, deadline, logger)
        }
    }

    /// ResourceNotFound on an identity, or a disabled identity, ends the session.
    private static func meansIdentityGone(_ error: FederationError) -> Bool {
        guard error.operation == "GetCredentialsForIdentity" || error.operation == "GetOpenIdToken" else { return false }
        if error.code == .resourceNotFound { return true }
        if error.code == .notAuthorized, let message = error.serviceMessage?.lowercased() {
            return message.contains("disabled") || message.contains("forbidden")
        }
        return false
    }

    // MARK: - State

    private func currentState(of session: String) -> SessionState {
        if federating.contains(session) { return .federating }
        guard let record = records[session] else { return .notFederated }
        return record.state(now: now(), margin: configuration.expiryMargin)
    }

    /// Publishes `state` when it differs from what observers last saw.
    private func publish(_ state: SessionState, session: String) {
        guard published[session] != state else { return }
        if state == .notFederated {
            published[session] = nil
        } else {
            published[session] = state
        }
        logger.debug("session state changed", metadata: ["broker.session": "\(session)", "broker.state": "\(state)"])
        broadcaster.publish(state, session: session)
    }

    /// Makes sure the next expiry among federated sessions will be announced,
    /// announcing the ones already due. Scans every session: for start-up,
    /// subscriptions and the watcher's wake-ups, not for each federation.
    private func scheduleExpiryWatch() {
        var next: Date?
        let current = now()
        for (name, record) in records where record.phase == .federated && published[name] != .expired {
            guard let expiration = record.credentials?.expiration else { continue }
            let due = expiration.addingTimeInterval(-configuration.expiryMargin.timeInterval)
            if due <= current {
                publish(.expired, session: name)
            } else if next.map({ due < $0 }) ?? true {
                next = due
            }
        }
        guard let next else {
            expiryWatcher?.cancel()
            expiryWatcher = nil
            expiryWatchDue = nil
            return
        }
        if let scheduled = expiryWatchDue, scheduled <= next, expiryWatcher != nil { return }
        startExpiryWatcher(due: next, now: current)
    }

    /// Makes sure `session`'s expiry will be announced, in constant time: the
    /// watcher only moves when this session is due before everything else.
    private func scheduleExpiryWatch(for session: String) {
        guard let expiration = records[session]?.credentials?.expiration else { return }
        let current = now()
        let due = expiration.addingTimeInterval(-configuration.expiryMargin.timeInterval)
        // Already inside the margin: the caller published `expired`.
        guard due > current else { return }
        if let scheduled = expiryWatchDue, scheduled <= due, expiryWatcher != nil { return }
        startExpiryWatcher(due: due, now: current)
    }

    private func startExpiryWatcher(due: Date, now current: Date) {
        expiryWatcher?.cancel()
        expiryWatchDue = due
        // Clamped: a due time far away (a negative margin, say) must not overflow the conversion.
        let delay = min(max(0, due.timeIntervalSince(current)), 1e9)
        expiryWatcher = Task { [weak self] in
            do {
                try await Task.sleep(for: .milliseconds(Int64(delay * 1000) + 5))
            } catch {
                return
            }
            await self?.expiryWatchFired()
        }
    }

    private func expiryWatchFired() {
        expiryWatcher = nil
        expiryWatchDue = nil
        scheduleExpiryWatch()
    }

    // MARK: - Per-session serialisation

    private func acquire(_ session: String) async {
        if inFlight[session] == nil {
            inFlight[session] = []
            return
        }
        await withCheckedContinuation { continuation in
            inFlight[session, default: []].append(continuation)
        }
    }

    private func release(_ session: String) {
        guard var waiters = inFlight[session], !waiters.isEmpty else {
            inFlight[session] = nil
            return
        }
        let next = waiters.removeFirst()
        inFlight[session] = waiters
        next.resume()
    }
}
