#if canImport(FoundationEssentials)
package import FoundationEssentials
#else
package import Foundation
#endif
public import Logging
public import SecureStorage

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
    /// How many unread events a stream of ``allStateUpdates()`` holds before it drops the oldest.
    public static let allStateUpdatesBufferSize = 1_024

    /// The session name used when none is given.
    public static let defaultSession = "default"

    /// The longest provider token ``federate(token:provider:options:session:)`` takes, in
    /// UTF-8 bytes: Cognito's limit for a `Logins` value (50,000 characters; tokens are ASCII).
    public static let maximumTokenBytes = 50_000

    /// The configuration this client federates with; `nil` for a client made with
    /// ``init(keystore:expiryMargin:sessionCacheCapacity:logger:)``, which only reads,
    /// observes and clears saved sessions.
    public nonisolated let configuration: FederationConfiguration?

    let cognito: CognitoIdentityClient?
    /// The classic flow's STS client, or why its endpoint is unusable (reported only when
    /// the classic flow is asked for, so a bad `AWS_ENDPOINT_URL_STS` cannot break the enhanced flow).
    let sts: Result<STSClient, FederationError>?
    let store: SessionStore
    let expiryMargin: Duration
    let renewalLead: Duration
    let renewalPostponement: Duration
    let federationTimeout: Duration
    let logger: Logger
    /// The wall clock every expiry is read against (injectable for tests); the credential
    /// server reads the same one.
    package nonisolated let now: @Sendable () -> Date
    let broadcaster: StateBroadcaster

    var cache: LRUCache<CachedSession>
    /// Reminder bookkeeping of evicted sessions (bounded as the cache is).
    var reminderMemories: LRUCache<ReminderMemory>
    /// Reads and this client's writes of sessions in flight, and whether the feed reported
    /// a change of each meanwhile.
    var callsInFlight = CallsInFlight()
    /// Sessions being re-read (one re-read at a time each, in the background or not), and
    /// whether another re-read of each was asked for meanwhile.
    var reloadsAskedAgain: [String: Bool] = [:]
    /// Uncertain windows of failed writes of sessions that were not cached.
    var uncertainWrites: [String: ContinuousClock.Instant] = [:]
    var locks = SessionLockTable()
    var expirySchedule = DueSchedule()
    var expiryTimer: Task<Void, Never>?
    var expiryTimerDue: Date?
    /// Which arming of the timer ``expiryTimer`` is: a timer whose sleep ended just as it was
    /// replaced (too late for its cancellation) must not clear its successor.
    var expiryTimerArming: UInt64 = 0
    /// Clears under way, which shutdown lets finish before it ends the streams, and who waits
    /// for them.
    var clearsInFlight = 0
    var clearWaiters = Waiters()
    /// The longest the expiry timer sleeps before looking at the wall clock again: due times
    /// are wall-clock times, the sleep is not, and a clock stepped forward (NTP, a resumed
    /// virtual machine) would otherwise delay expiries until the sleep ended.
    var longestExpiryTimerSleep: Duration = .seconds(30)
    var changeFeed: Task<Void, Never>?
    /// Whether the client follows the store's change feed once it reads or observes a session
    /// (see ``stopFollowingStoreChanges()``).
    var followsStoreChanges = true
    /// The re-read of every cached and observed session the feed's `.all` asks for, while
    /// one runs, and whether another `.all` came meanwhile (see `storeChanged(_:)`).
    var reloadOfEverything: Task<Void, Never>?
    var reloadOfEverythingAgain = false
    var lastReloadOfEverything: ContinuousClock.Instant?
    /// Re-reads running in tasks of their own (see `reloadInTheBackground(_:)`), which
    /// shutdown cancels and waits for.
    var backgroundReloads: [UInt64: Task<Void, Never>] = [:]
    var nextBackgroundReload: UInt64 = 0
    /// Observed sessions whose re-read failed, waiting to be re-read again, and how many
    /// such tries failed in a row.
    var reloadRetries: Set<String> = []
    var failedRetries: [String: Int] = [:]
    /// Evicted sessions whose read-back for observers of every session failed, and how many
    /// times in a row (see `announceEvictedExpiry(_:)`).
    var evictedReadFailures: [String: Int] = [:]
    /// Evicted sessions that fell due, waiting for their read-back, in order, and whether a
    /// task is reading them back (see `queueEvictedReadBack(_:)`).
    var evictedReadBacks = EvictedReadBacks()
    /// The size of ``uncertainWrites`` at which it is next swept of windows that ended.
    var uncertainWritesSweepAt = 64
    var nextGeneration: UInt64 = 0
    /// The transport this client created and stops at shutdown (none when injected).
    let ownedTransport: CurlTransport?
    /// Federations between ``tracked(_:)``'s start and end; shutdown waits for none to be left.
    var federationsInFlight = 0
    /// Fired by shutdown past its grace period; see ``CancellationSignal``.
    nonisolated let shutdownSignal: CancellationSignal
    /// Whether ``shutdown(gracePeriod:)`` was called (it may still be under way).
    var shutdownBegan = false
    /// Opt-in metrics and tracing.
    let instrumentation: FederationInstrumentation
    /// Sessions held by state, for the `identity_broker_sessions` gauges (with metrics only).
    let sessionGauges: SessionGauges?
    var sessionCounts: [SessionState: Int] = [:]
    var shutdownWaiters = Waiters()
    /// Whether shutdown finished; later calls wait for it through ``shutdownCompletionWaiters``.
    var shutdownEnded = false
    var shutdownCompletionWaiters = Waiters()
    /// Whether shutdown's grace period was cut short (``cutShutdownGracePeriod()``).
    var shutdownGraceCut = false

    /// Creates a client that federates with `configuration` and keeps sessions in
    /// `keystore`, or in its own memory when `keystore` is `nil`.
    ///
    /// Nothing is read from the keystore here: sessions are read when first used.
    ///
    /// - Parameters:
    ///   - configuration: the pool, endpoint, timeouts, margins and cache size.
    ///   - keystore: where sessions live; share one store between clients, processes or
    ///     hosts to share sessions. Default: this client's memory only. Every store keeps a
    ///     session (expired ones too: the identity ID is reused by the next federation) until
    ///     it is cleared, so a server that federates ever new sessions should
    ///     ``clear(session:)`` those it is done with; the cache in front of the store is
    ///     bounded by ``FederationConfiguration/sessionCacheCapacity``, the store is not.
    ///   - instrumentation: opt-in metrics and spans (``FederationInstrumentation``); none by default.
    ///   - logger: where to log; nothing is logged when `nil`. No level ever shows a secret.
    /// - Throws: ``FederationError/Code/invalidConfiguration`` when the pool ID, region,
    ///   endpoint or certificate authority file is unusable, or a duration or limit is (a
    ///   negative expiry margin or renewal lead time; a renewal postponement, timeout or
    ///   response size cap of zero or less).
    public init(
        configuration: FederationConfiguration,
        keystore: (any Keystore)? = nil,
        instrumentation: FederationInstrumentation = .none,
        logger: Logger? = nil
    ) throws(FederationError) {
        // A transport of its own (its thread starts on first use), so that shutting this
        // client down stops its thread without touching any other client's requests.
        let transport = CurlTransport()
        try self.init(
            configuration: configuration,
            transport: transport,
            keystore: keystore ?? InMemoryKeystore(),
            environment: ProcessInfo.processInfo.environment,
            now: { Date() },
            logger: logger,
            ownedTransport: transport,
            instrumentation: instrumentation
        )
    }

    /// Creates a client that reads, observes and clears the sessions saved in `keystore`
    /// without a pool configuration: it never reaches the network, and its
    /// ``federate(token:provider:options:session:)`` and ``federateAsGuest(options:session:)``
    /// fail with ``FederationError/Code/invalidConfiguration``.
    ///
    /// - Parameters:
    ///   - keystore: where the sessions are saved.
    ///   - expiryMargin: credentials read as expired this long before their expiration (a
    ///     negative margin counts as zero: credentials never read valid past their expiration).
    ///   - sessionCacheCapacity: how many sessions to keep in memory.
    ///   - logger: where to log; nothing is logged when `nil`.
    public init(
        keystore: any Keystore,
        expiryMargin: Duration = FederationConfiguration.defaultExpiryMargin,
        sessionCacheCapacity: Int = FederationConfiguration.defaultSessionCacheCapacity,
        logger: Logger? = nil
    ) {
        self.init(
            configuration: nil, cognito: nil, sts: nil, keystore: keystore, expiryMargin: max(expiryMargin, .zero),
            renewalLead: FederationConfiguration.defaultRenewalLeadTime,
            renewalPostponement: FederationConfiguration.defaultRenewalPostponement,
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
        logger: Logger?,
        ownedTransport: CurlTransport? = nil,
        instrumentation: FederationInstrumentation = .none
    ) throws(FederationError) {
        try configuration.checkDurations()
        // Shutdown past its grace period fires this signal: every transfer and retry wait of
        // the client's federations ends, and their callers' tasks are left uncancelled.
        let shutdownSignal = CancellationSignal()
        let instrumented: any HTTPTransport = instrumentation.isEnabled
            ? InstrumentedTransport(base: transport, instrumentation: instrumentation) : transport
        let transport = SignalledTransport(base: instrumented, signal: shutdownSignal)
        // One retry quota for the client's Cognito and STS calls alike.
        let runner = (retryRunner ?? RetryRunner(policy: configuration.retry, quota: RetryQuota(policy: configuration.retry)))
            .interrupted(by: shutdownSignal)
        let cognito = try CognitoIdentityClient(
            configuration: configuration, transport: transport, environment: environment, retryRunner: runner)
        let sts: Result<STSClient, FederationError>
        do {
            sts = .success(STSClient(
                endpoint: try configuration.resolvedSTSEndpoint(environment: environment),
                transport: transport, limits: cognito.limits, retry: runner))
        } catch {
            // An explicit STS endpoint fails here, as the endpoint does; the environment's
            // variables only in the classic flow that uses them (they may be meant for others).
            if configuration.stsEndpoint != nil { throw error }
            sts = .failure(error)
        }
        self.init(
            configuration: configuration, cognito: cognito, sts: sts, keystore: keystore, expiryMargin: configuration.expiryMargin,
            renewalLead: configuration.renewalLeadTime, renewalPostponement: configuration.renewalPostponement,
            federationTimeout: configuration.federationTimeout, sessionCacheCapacity: configuration.sessionCacheCapacity,
            now: now, logger: logger, ownedTransport: ownedTransport, instrumentation: instrumentation,
            shutdownSignal: shutdownSignal)
    }

    private init(
        configuration: FederationConfiguration?,
        cognito: CognitoIdentityClient?,
        sts: Result<STSClient, FederationError>?,
        keystore: any Keystore,
        expiryMargin: Duration,
        renewalLead: Duration,
        renewalPostponement: Duration,
        federationTimeout: Duration,
        sessionCacheCapacity: Int,
        now: @escaping @Sendable () -> Date,
        logger: Logger?,
        ownedTransport: CurlTransport? = nil,
        instrumentation: FederationInstrumentation = .none,
        shutdownSignal: CancellationSignal = CancellationSignal()
    ) {
        self.ownedTransport = ownedTransport
        self.shutdownSignal = shutdownSignal
        self.instrumentation = instrumentation
        sessionGauges = instrumentation.metrics.map { SessionGauges(factory: $0, instrumentation: instrumentation) }
        self.configuration = configuration
        self.cognito = cognito
        self.sts = sts
        store = SessionStore(keystore: keystore)
        self.expiryMargin = expiryMargin
        self.renewalLead = renewalLead
        self.renewalPostponement = renewalPostponement
        self.federationTimeout = federationTimeout
        cache = LRUCache(capacity: sessionCacheCapacity)
        reminderMemories = LRUCache(capacity: sessionCacheCapacity)
        self.now = now
        self.logger = logger ?? .disabled
        broadcaster = StateBroadcaster(logger: self.logger)
    }

    deinit {
        expiryTimer?.cancel()
        changeFeed?.cancel()
        reloadOfEverything?.cancel()
        broadcaster.finishAll()
    }

    // MARK: - Federation

    /// Exchanges a provider token for an identity ID and temporary credentials,
    /// and makes them `session`'s, in the keystore and in this client.
    ///
    /// JWT-shaped tokens (Google, Apple, OIDC, developer) are checked locally
    /// first: a malformed one, or one expired more than 5 minutes ago, fails
    /// with ``FederationError/Code/invalidToken`` before any request, as does an empty token
    /// or one longer than ``maximumTokenBytes``.
    ///
    /// The identity ID comes from, in order: ``FederationOptions/developerProvidedIdentityId``;
    /// for ``AuthProvider/developer``, the token's `sub` claim (a developer token
    /// never goes to `GetId`); the session's known ID (a guest identity this way
    /// gets the login linked to it); else `GetId`. A known ID the service
    /// rejects is dropped and `GetId` is tried once.
    ///
    /// With ``FederationOptions/flow`` set to ``FederationFlow/classic(_:)`` the credentials
    /// come from `GetOpenIdToken` and STS `AssumeRoleWithWebIdentity` instead of
    /// `GetCredentialsForIdentity` (see <doc:ChoosingAFlow>); the classic options are checked
    /// locally first (``FederationError/Code/invalidConfiguration``, nothing sent).
    ///
    /// Returns only after the session is committed to the keystore. It replaces what the
    /// session held when it started, whatever the expiration of either. When another client
    /// stored the session with a later expiration meanwhile (a federation racing this one;
    /// between two that both expire before the record they started from, the one committed
    /// last), that record is kept (the result returned here is still valid); when it stored a terminated session, that is
    /// kept and this call throws ``FederationError/Code/identityTerminated``.
    ///
    /// - Parameters:
    ///   - token: the provider's token; it is sent to the service and never stored or logged.
    ///   - provider: who issued `token`.
    ///   - options: a developer-provided identity ID, a custom role ARN, the flow.
    ///   - session: the end user's session name (see ``SessionName``).
    /// - Returns: the identity ID and credentials.
    /// - Throws: ``FederationError``; the session is then as it was before the call,
    ///   except that an answer saying the session's identity is gone makes it ``SessionState/terminated``
    ///   (not when the identity ID was given for this call, by `developerProvidedIdentityId` or a
    ///   developer token's `sub`, and is not the one the session holds: that call just fails with
    ///   the service's code; when the terminated session cannot be saved, the error still says the identity is gone, carries the
    ///   keystore's error, and the session keeps its saved record).
    ///   ``FederationError/Code/storage`` when the keystore cannot be reached.
    @discardableResult
    public func federate(
        token: String,
        provider: AuthProvider,
        options: FederationOptions = FederationOptions(),
        session: String = FederationClient.defaultSession
    ) async throws(FederationError) -> FederationResult {
        try SessionName.validate(session)
        try options.validate()
        let (cognito, configuration) = try federatingParts()
        let classic = try classicPlan(for: options, session: session)
        // Inside the federation's span and count: a token refused here is among the commonest
        // failures in production.
        return try await instrumentedFederation("federate", session: session, provider: provider) { () async throws(FederationError) -> FederationResult in
          let subject = try checkedTokenSubject(token, provider: provider, options: options)
          let logins = [provider.loginsKey: token]
          return try await tracked { () async -> Result<FederationResult, FederationError> in
            do throws(FederationError) {
                return .success(try await self.federateExchange(
                    session: session, provider: provider, options: options, classic: classic, logins: logins, tokenSubject: subject,
                    cognito: cognito, configuration: configuration))
            } catch {
                return .failure(error)
            }
          }
        }
    }

    /// Checks `token` locally, before anything is sent; returns its `sub` claim when it is a
    /// JWT that names the identity.
    private func checkedTokenSubject(_ token: String, provider: AuthProvider, options: FederationOptions) throws(FederationError) -> String? {
        guard !token.isEmpty else {
            throw FederationError(code: .invalidToken, message: "the provider token is empty")
        }
        // Cognito refuses longer ones anyway, and every error path scrubs the token from what
        // it reports: a token of megabytes forwarded from a user would cost that much again
        // per attempt.
        guard token.utf8.count <= Self.maximumTokenBytes else {
            throw FederationError(
                code: .invalidToken,
                message: "the provider token is \(token.utf8.count) bytes; Cognito takes at most \(Self.maximumTokenBytes)")
        }
        guard provider.issuesJWT, provider != .developer || options.developerProvidedIdentityId == nil else { return nil }
        let jwt = try JSONWebToken(parsing: token)
        try jwt.checkNotExpired(now: now())
        return jwt.subject
    }

    private func federateExchange(
        session: String, provider: AuthProvider, options: FederationOptions, classic: ClassicPlan?, logins: [String: String], tokenSubject: String?,
        cognito: CognitoIdentityClient, configuration: FederationConfiguration
    ) async throws(FederationError) -> FederationResult {
        try await exchange(session: session, operationName: "federate", provider: provider.identifier) { (previous) throws(FederationError) -> IdentityChoice in
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
            if let classic {
                return try await Self.classicCredentials(
                    cognito: cognito, plan: classic, identityId: identityId, logins: logins, deadline: deadline, logger: logger)
            }
            return try await cognito.getCredentialsForIdentity(
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
    /// With ``FederationOptions/flow`` set to ``FederationFlow/classic(_:)`` the guest's
    /// credentials come from `GetOpenIdToken` and STS `AssumeRoleWithWebIdentity` (the
    /// role must trust unauthenticated identities).
    ///
    /// - Parameters:
    ///   - options: the flow; a guest has no developer-provided identity ID or custom
    ///     role ARN (setting one is ``FederationError/Code/invalidConfiguration``).
    ///   - session: the session name (see ``SessionName``).
    /// - Throws: ``FederationError/Code/sessionConflict`` when the session holds an
    ///   authenticated identity (clear it first), or another client saved one while this call
    ///   ran (it stays); ``FederationError/Code/identityTerminated`` when the guest identity is
    ///   disabled (no other is asked for); otherwise as ``federate(token:provider:options:session:)``.
    @discardableResult
    public func federateAsGuest(
        options: FederationOptions = FederationOptions(),
        session: String = FederationClient.defaultSession
    ) async throws(FederationError) -> FederationResult {
        try SessionName.validate(session)
        let (cognito, configuration) = try federatingParts()
        guard options.developerProvidedIdentityId == nil, options.customRoleArn == nil else {
            throw FederationError(
                code: .invalidConfiguration,
                message: "a guest federation takes no developer-provided identity ID or custom role ARN; only the flow")
        }
        let classic = try classicPlan(for: options, session: session)
        return try await instrumentedFederation("guest", session: session, provider: nil) { () async throws(FederationError) -> FederationResult in
            try await tracked { () async -> Result<FederationResult, FederationError> in
                do throws(FederationError) {
                    return .success(try await self.guestExchange(session: session, classic: classic, cognito: cognito, configuration: configuration))
                } catch {
                    return .failure(error)
                }
            }
        }
    }

    private func guestExchange(
        session: String, classic: ClassicPlan?, cognito: CognitoIdentityClient, configuration: FederationConfiguration
    ) async throws(FederationError) -> FederationResult {
        try await exchange(session: session, operationName: "guest", provider: nil) { (previous) throws(FederationError) -> IdentityChoice in
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
            if let classic {
                return try await Self.classicCredentials(
                    cognito: cognito, plan: classic, identityId: identityId, logins: nil, deadline: deadline, logger: logger)
            }
            return try await cognito.getCredentialsForIdentity(
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
        let machine = try await current(name)
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
        let machine = try await current(session)
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
    /// flight in this client to finish first (a caller cancelled meanwhile stops waiting and
    /// gets ``FederationError/Code/cancelled``). A damaged saved item is removed too.
    ///
    /// - Throws: ``FederationError/Code/invalidConfiguration`` for a name that breaks
    ///   ``SessionName``'s rule; ``FederationError/Code/storage`` when the saved session
    ///   could not be removed; the session is then kept.
    public func clear(session: String = FederationClient.defaultSession) async throws(FederationError) {
        try SessionName.validate(session)
        // The entry cached below must hear of other clients' changes from now on.
        startChangeFeed()
        // Counted before the lock: shutdown ends the streams only once every clear is done,
        // so that observers are told of it.
        clearsInFlight += 1
        defer { clearEnded() }
        try await acquire(session)
        defer { release(session) }
        let removed: Bool, raced: Bool
        do {
            (removed, raced) = try await recordingFeedChanges(session) { () async throws(FederationError) in try await store.remove(session) }
        } catch {
            // A remove that timed out or lost its connection may still apply.
            markWriteUncertain(session)
            throw error
        }
        let wasCached = cache.peek(session) != nil
        apply(session, localWrite: true) { machine, now, margin in machine.stored(nil, now: now, margin: margin) }
        // An entry made from nothing announces nothing; observers of every session still learn
        // that a session they never read here (or one evicted) is gone.
        if removed && !wasCached && broadcaster.hasObserversOfAll { broadcaster.publish(.notFederated, session: session) }
        rereadIfRaced(session, raced: raced)
        logger.debug("session cleared", metadata: ["broker.session": "\(session)"])
    }

    // MARK: - Observing

    /// A stream of `session`'s states: the current one first, then every change, made
    /// by this client or by any other sharing its keystore.
    ///
    /// Expiry is announced when it happens, whether or not anyone reads the
    /// session. The stream ends when the client is released or shut down. For a name no
    /// session can have (see ``SessionName``), it yields ``SessionState/notFederated`` and ends.
    ///
    /// When the keystore cannot be read as the stream starts (a database outage), the first
    /// state is ``SessionState/notFederated`` although the session may be federated: the
    /// client reads it again from a second later, backing off while reads fail, and yields
    /// the stored state once a read succeeds. Before asking a user to sign in again on
    /// `notFederated`, confirm it with ``session(_:)``, which throws while the store is
    /// unreachable.
    public func stateUpdates(for session: String = FederationClient.defaultSession) async -> AsyncStream<SessionState> {
        guard SessionName.isValid(session) else { return Self.endedStream(of: .notFederated) }
        let current = await stateForNewObserver(session)
        return broadcaster.stream(for: session, current: current)
    }

    /// A stream of `session`'s events: its current state first, then every state change
    /// (by any client sharing the keystore) and every renewal reminder
    /// (``SessionEvent/Kind/renewalDue(expiresAt:)``), which comes
    /// ``FederationConfiguration/renewalLeadTime`` before the session would read expired.
    /// For a name no session can have, it yields ``SessionState/notFederated`` and ends. A
    /// keystore that cannot be read as the stream starts gives a first `notFederated` as in
    /// ``stateUpdates(for:)``.
    public func events(for session: String = FederationClient.defaultSession) async -> AsyncStream<SessionEvent> {
        guard SessionName.isValid(session) else { return Self.endedStream(of: SessionEvent(session: session, state: .notFederated)) }
        let current = await stateForNewObserver(session)
        let stream = broadcaster.eventStream(for: session, current: current)
        tick(session)
        return stream
    }

    /// A stream of `element` alone: what a name no session can have is observed as. It is
    /// never read (a name from a request could otherwise make the store retry reads of it
    /// for as long as it is observed, and reach the logs).
    private static func endedStream<Element: Sendable>(of element: Element) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self)
        continuation.yield(element)
        continuation.finish()
        return stream
    }

    /// A stream of every event from now on: state changes of the sessions this client
    /// holds and of any session another client sharing the keystore changes (a removal
    /// included, of a session this client never read), expiries of sessions it read since it
    /// started (one the cache evicted is read back when due), and renewal reminders
    /// (``SessionEvent/Kind/renewalDue(expiresAt:)``) of the sessions it holds. The stream
    /// ends when the client is released or shut down.
    ///
    /// When the keystore cannot say which keys changed (`KeystoreChange.all`: its feed
    /// reconnected after an outage, or a stream's buffer overflowed), the client re-reads the
    /// sessions it holds or that are observed one by one, and reports those that changed; a
    /// change to any other session made during that gap is not reported.
    ///
    /// The stream holds up to ``allStateUpdatesBufferSize`` events a consumer has not read
    /// yet; past that, the oldest are dropped (and a warning is logged, once per stream).
    /// Bursts happen: a clock stepped forward, or a virtual machine resumed, announces every
    /// expiry that fell due at once. A consumer that cannot keep up can re-read what it needs
    /// with ``sessionNames()`` and ``session(_:)``.
    public func allStateUpdates() -> AsyncStream<SessionEvent> {
        startChangeFeed()
        // Subscribed first, so that reminders and expiries already due reach this stream too.
        let stream = broadcaster.streamForAll()
        // Every time, not only for a first observer: an earlier one whose stream is ending
        // may still be counted.
        scheduleRemindersNobodyReceived()
        announceDueExpiries()
        return stream
    }

    /// "Not now": the caller cannot push a new token for `session` yet. Its next renewal
    /// reminder comes no sooner than ``FederationConfiguration/renewalPostponement`` from
    /// now, and never after the session expired, was cleared or was federated again (new
    /// credentials get reminders of their own). Nothing is refreshed.
    ///
    /// - Returns: whether the session holds federated credentials, not yet expired, to
    ///   postpone a reminder for.
    @discardableResult
    public func postponeRenewalReminder(for session: String = FederationClient.defaultSession) async throws(FederationError) -> Bool {
        try SessionName.validate(session)
        _ = try await cachedOrLoaded(session)
        let interval = renewalPostponement
        var postponed = false
        apply(session) { machine, now, margin in
            postponed = machine.postponeRenewal(now: now, margin: margin, interval: interval)
            return nil
        }
        return postponed
    }
}
