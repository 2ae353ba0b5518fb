#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import SecureStorage

/// One federation of a session: under the session's lock, with the state machine
/// around the network calls and the versioned commit after them.
extension FederationClient {
    typealias IdentityChoice = (identityId: String?, cached: Bool)

    /// The Cognito client and configuration, or `invalidConfiguration` for a client made
    /// without a pool configuration.
    func federatingParts() throws(FederationError) -> (CognitoIdentityClient, FederationConfiguration) {
        guard let cognito, let configuration else {
            throw FederationError(
                code: .invalidConfiguration,
                message: "this client was created without a pool configuration and can only read, observe and clear sessions")
        }
        return (cognito, configuration)
    }

    /// Runs one federation of `session`: `federating` while in flight, the new record
    /// once committed, the previous one on failure, `terminated` when the identity is gone.
    func exchange(
        session: String,
        operationName: String,
        provider: String?,
        choose: (SessionRecord?) throws(FederationError) -> IdentityChoice,
        credentials: (String, ContinuousClock.Instant, Logger) async throws(FederationError) -> FederationResult,
        identity: (ContinuousClock.Instant, Logger) async throws(FederationError) -> String
    ) async throws(FederationError) -> FederationResult {
        try await acquire(session)
        defer { release(session) }
        if Task.isCancelled || shutdownSignal.isFired {
            throw FederationError(code: .cancelled, message: "\(operationName) was cancelled before it started")
        }
        let (previous, previousUnreadable) = try await recordBeforeFederating(session)
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
        apply(session) { machine, now, margin in machine.federationStarted(now: now, margin: margin) }

        let deadline = ContinuousClock.now.advanced(by: federationTimeout)
        let result: FederationResult
        do {
            result = try await resolveCredentials(
                choice: choice, guest: provider == nil, credentials: credentials, identity: identity, deadline: deadline, logger: sessionLogger)
        } catch {
            // An identity the caller named (a developer-provided ID, a developer token's `sub`)
            // that is not the session's own: its being gone says nothing of the session, which
            // may hold another identity's valid credentials (a mistyped ID, another region's
            // endpoint). The call fails; the session stays as it was.
            var namedByCaller = choice.identityId != nil && !choice.cached && choice.identityId != previous?.identityId
            if error.identityGone && choice.identityId != nil && !choice.cached {
                // The cache may lag another client's federation (with that very identity, or
                // another) or clear: the store decides whether the gone one is the session's;
                // unreadable, the cache's view stands.
                do {
                    namedByCaller = choice.identityId != (try await store.load(session))?.identityId
                } catch {}
            }
            guard error.identityGone, !namedByCaller else {
                sessionLogger.debug("federation failed", metadata: ["broker.error": "\(error.code)"])
                federationFailed(session, overUnreadable: previousUnreadable)
                if error.identityGone {
                    throw FederationError(
                        code: error.code,
                        message: "the identity service says the identity ID given for this call (a developer-provided ID, or the developer token's subject) "
                            + "is not found or disabled; session '\(session)' was not changed: check the ID, the identity pool and the region",
                        operation: error.operation, serviceErrorType: error.serviceErrorType, serviceMessage: error.serviceMessage,
                        httpStatus: error.httpStatus)
                }
                throw error
            }
            // Shutdown's deadline passed while the answer was on its way: not committed, as a
            // success would not be (below).
            if shutdownSignal.isFired {
                sessionLogger.debug("federation cancelled by shutdown before its commit")
                federationFailed(session, overUnreadable: previousUnreadable)
                throw FederationError(code: .cancelled, message: "\(operationName) was cancelled by the client's shutdown before its commit")
            }
            let terminated = SessionRecord(
                phase: .terminated, identityId: choice.identityId ?? previous?.identityId, provider: provider, credentials: nil)
            var message = "the identity service says the identity is gone or disabled; clear the session, then federate again"
            var storageError: KeystoreError?
            do {
                let (_, raced) = try await recordingFeedChanges(session) { () async throws(FederationError) in
                    try await store.save(terminated, session: session)
                }
                sessionLogger.debug("federation failed: identity gone", metadata: ["broker.error": "\(error.code)"])
                apply(session, localWrite: true) { machine, now, margin in
                    machine.federationEnded(holding: .some(terminated), now: now, margin: margin)
                }
                rereadIfRaced(session, raced: raced)
            } catch let saveError {
                // The store is the source of truth: a `terminated` held only here would differ
                // from what every other client reads, and vanish at the next reload. The
                // session keeps its stored record, and the caller learns both facts.
                sessionLogger.warning(
                    "identity gone, but the terminated session was not saved",
                    metadata: ["broker.error": "\(error.code)", "broker.storageError": "\(saveError.keystoreError?.code.description ?? saveError.code.description)"])
                federationFailed(session, overUnreadable: previousUnreadable)
                // The save may still land (a timeout, a lost connection).
                markWriteUncertain(session)
                message = "the identity service says the identity is gone or disabled, but the session could not be marked terminated ("
                    + "\(saveError.message)); it keeps its saved record until then; clear the session, then federate again"
                storageError = saveError.keystoreError
            }
            throw FederationError(
                code: .identityTerminated,
                message: message,
                operation: error.operation,
                serviceErrorType: error.serviceErrorType,
                serviceMessage: error.serviceMessage,
                httpStatus: error.httpStatus,
                keystoreError: storageError
            )
        }

        // Shutdown's deadline passed while the answer was on its way: cancelled like the
        // federations it cut, so the session stays as it was.
        if shutdownSignal.isFired {
            sessionLogger.debug("federation cancelled by shutdown before its commit")
            federationFailed(session, overUnreadable: previousUnreadable)
            throw FederationError(code: .cancelled, message: "\(operationName) was cancelled by the client's shutdown before its commit")
        }
        if let implausible = implausibleAnswer(result) {
            sessionLogger.debug("federation failed: implausible answer")
            federationFailed(session, overUnreadable: previousUnreadable)
            throw implausible
        }
        var record = SessionRecord(phase: .federated, identityId: result.identityId, provider: provider, credentials: result.credentials)
        // This federation follows the record it started from: it replaces it even with
        // credentials that expire sooner (racing federations still go by expiration).
        record.versionFloor = record.versionFloor(replacing: previous, notAfter: now().addingTimeInterval(Self.longestPlausibleLifetime))
        let stored: Bool, holding: SessionRecord??, raced: Bool
        var lostToUnreadable: FederationError?
        do {
            ((stored, holding), raced) = try await recordingFeedChanges(session) { () async throws(FederationError) in
                guard try await store.save(record, session: session) else {
                    // Another client's federation, racing this one, stored the session with a
                    // later expiration meanwhile:
                    // keep what the store holds (theirs, or nothing if a clear followed).
                    // Unreadable now: the session keeps what it held, and is read again.
                    // (Not `try?`, which would make a failed read look like an empty store.)
                    do throws(FederationError) {
                        return (false, .some(try await store.load(session)))
                    } catch where error.isUnreadableItem {
                        // What won cannot be opened here (damaged, sealed with another key, at a
                        // version above this federation's): nothing of this call is stored, and
                        // reporting success would leave the caller with a session it cannot read.
                        lostToUnreadable = FederationError(
                            code: .storage,
                            message: "\(operationName) of session '\(session)' was not saved: the session's stored item is newer and cannot be "
                                + "opened here (damaged, or sealed with another key: check that this instance has the key the others use "
                                + "before clearing the session, which removes it for every instance)",
                            keystoreError: error.keystoreError)
                        return (false, nil)
                    } catch {
                        return (false, nil)
                    }
                }
                return (true, .some(record))
            }
        } catch {
            sessionLogger.debug("federation not saved", metadata: ["broker.error": "\(error.code)"])
            federationFailed(session, overUnreadable: previousUnreadable)
            // A commit that timed out or lost its connection may still apply.
            markWriteUncertain(session)
            throw error
        }
        if let lostToUnreadable {
            // Nothing was written: no uncertain window, and the session keeps what it held.
            sessionLogger.debug("federation not saved", metadata: ["broker.error": "\(lostToUnreadable.code)"])
            federationFailed(session, overUnreadable: previousUnreadable)
            throw lostToUnreadable
        }
        if !stored { sessionLogger.debug("a newer federation of the session is stored; keeping it") }
        // A lost save changed nothing in the store: no local write that outdates reads in flight.
        apply(session, localWrite: stored) { machine, now, margin in machine.federationEnded(holding: holding, now: now, margin: margin) }
        rereadIfRaced(session, raced: raced || holding == nil)
        if !stored, case .some(.some(let winner)) = holding, let conflict = Self.lostTo(winner, session: session, guest: provider == nil) {
            sessionLogger.debug("federation not saved", metadata: ["broker.error": "\(conflict.code)"])
            throw conflict
        }
        sessionLogger.debug(
            "federation succeeded",
            metadata: ["broker.identityId": "\(result.identityId)", "broker.expiration": "\(Int64(result.credentials.expiration.timeIntervalSince1970))"]
        )
        return result
    }

    /// The error a federation that lost its commit to `winner` (another client's, saved
    /// meanwhile) reports instead of its own credentials, when they would contradict what
    /// the session now holds: a terminated session, or a login where a guest call ran (a
    /// guest never replaces a login, ``SessionRecord/storeVersion``). `nil` when the winner
    /// is a federation the caller's credentials may stand beside.
    private static func lostTo(_ winner: SessionRecord, session: String, guest: Bool) -> FederationError? {
        if winner.phase == .terminated {
            return FederationError(
                code: .identityTerminated,
                message: "another client found the identity of session '\(session)' gone or disabled while this federation ran, "
                    + "and the session is terminated; clear the session, then federate again")
        }
        if guest && !winner.isGuest {
            return FederationError(
                code: .sessionConflict,
                message: "another client federated session '\(session)' with an authenticated identity while this guest call ran; "
                    + "the guest identity was not saved (a guest never replaces a login; clear the session first)")
        }
        return nil
    }

    /// The longest credentials any flow hands out last: Cognito's are good for an hour, STS's
    /// for at most 12 hours. Beyond that (with a margin for a skewed clock) the answer is not
    /// plausible, and storing it would do harm: the store keeps the record with the later
    /// expiration, so one far in the future would win over every later federation.
    static let longestPlausibleLifetime: TimeInterval = 36 * 3600

    /// An `invalidResponse` for an answer no AWS service sends, else `nil`: an identity ID
    /// that is not letters, digits and `: _ . -` (Cognito's are `REGION:GUID`), or a credential
    /// with a control character or a byte outside ASCII, or either longer than any AWS issues
    /// (they go into log lines, `credential_process` output, environment variables and every
    /// later request: a line break there forges a log line or an output field, a space and `=`
    /// a field of a logfmt line), or credentials that expired already or would last longer
    /// than ``longestPlausibleLifetime``.
    private func implausibleAnswer(_ result: FederationResult) -> FederationError? {
        let fields: [(name: String, value: String, longest: Int, allowed: (UInt8) -> Bool)] = [
            ("identity ID", result.identityId, 128, Self.isIdentityIdByte),
            ("access key ID", result.credentials.accessKeyId, 128, Self.isPrintableASCII),
            ("secret access key", result.credentials.secretAccessKey, 1024, Self.isPrintableASCII),
            ("session token", result.credentials.sessionToken, 16384, Self.isPrintableASCII),
        ]
        for field in fields {
            let bytes = field.value.utf8
            guard !bytes.isEmpty, bytes.count <= field.longest, bytes.allSatisfy(field.allowed) else {
                // Never the value: the credentials are secrets, and the text may be anything.
                return FederationError(
                    code: .invalidResponse,
                    message: "the service sent a\(field.name.first == "a" || field.name.first == "i" ? "n" : "") \(field.name) of \(bytes.count) bytes "
                        + "that AWS would not send (a character it never uses, or more than \(field.longest) bytes); check the endpoint")
            }
        }
        return implausibleExpiration(result.credentials.expiration)
    }

    private static func isPrintableASCII(_ byte: UInt8) -> Bool { (0x20...0x7E).contains(byte) }

    private static func isIdentityIdByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: ":"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "-"):
            true
        default:
            false
        }
    }

    /// An `invalidResponse` for credentials that expired already or would last longer than
    /// ``longestPlausibleLifetime``, else `nil`.
    private func implausibleExpiration(_ expiration: Date) -> FederationError? {
        let lifetime = expiration.timeIntervalSince(now())
        if lifetime <= 0 {
            return FederationError(
                code: .invalidResponse,
                message: "the service sent credentials that expired \(Int(-lifetime)) s ago; check this machine's clock, or the endpoint")
        }
        if lifetime > Self.longestPlausibleLifetime {
            return FederationError(
                code: .invalidResponse,
                message: "the service sent credentials that would last \(Int(lifetime / 3600)) hours, longer than any AWS flow gives; "
                    + "check this machine's clock, or the endpoint")
        }
        return nil
    }

    /// What the session holds before a federation: from the cache or the store. A saved
    /// item that cannot be opened (damaged, sealed with another key) is replaced by the
    /// new federation rather than blocking it; a store that cannot be reached fails it.
    private func recordBeforeFederating(_ session: String) async throws(FederationError) -> (record: SessionRecord?, unreadable: Bool) {
        do {
            return (try await cachedOrLoaded(session).record, false)
        } catch where error.isUnreadableItem {
            // A warning, not debug: with a wrong key (one instance of a fleet misconfigured)
            // this overwrites an item the other instances could open.
            logger.warning(
                "saved session unreadable; the federation replaces it",
                metadata: ["broker.session": "\(session)", "broker.error": "\(error.keystoreError?.code.description ?? error.code.description)"])
            return (nil, true)
        }
    }

    /// Ends a federation that failed: the session keeps what it held. Over an item that could
    /// not be opened (never cached), the entry this federation made holds nothing: it is
    /// dropped, so that reads report the item's failure again rather than `notFederated`.
    private func federationFailed(_ session: String, overUnreadable: Bool) {
        apply(session) { machine, now, margin in machine.federationEnded(holding: nil, now: now, margin: margin) }
        if overUnreadable { uncacheIfHoldingNothing(session) }
    }

    /// GetId when needed, then the credentials step (GetCredentialsForIdentity, or the
    /// classic flow's GetOpenIdToken and AssumeRoleWithWebIdentity); a cached ID Cognito
    /// rejects is dropped and GetId tried once.
    private func resolveCredentials(
        choice: IdentityChoice,
        guest: Bool,
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
        } catch where choice.cached && error.operation != STSClient.operation
            && (error.code == .notAuthorized || error.code == .resourceNotFound)
            && !(guest && error.isDisabledIdentity)
        {
            // Only Cognito's rejection says the cached ID is wrong; STS refusing the role does not.
            // A guest identity the service says is disabled is not wrong, it is refused: GetId
            // would mint another, routing around whoever disabled it, so the session becomes
            // terminated instead. "Forbidden" is not that: Cognito says so of an identity a
            // login was linked to (by another client, say), which GetId then replaces with a
            // new guest identity, as the cached-ID rule intends. (With a login, GetId names the
            // login's own identity: the same one, which then terminates the session, or, for a
            // guest being linked, the login's, which is what the call asked for.)
            logger.debug("cached identity ID rejected; asking GetId once", metadata: ["broker.error": "\(error.code)"])
            let identityId = try await identity(deadline, logger)
            return try await credentials(identityId, deadline, logger)
        }
    }
}
