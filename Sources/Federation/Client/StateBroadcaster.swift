#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import Synchronization

/// Fans session state changes out to `AsyncStream` observers, per session and
/// for all sessions. Lock-based so observers can subscribe without awaiting the
/// client's actor.
final class StateBroadcaster: Sendable {
    private struct Observers {
        var nextId = 0
        /// Set by ``finishAll()``: a stream made afterwards ends at once.
        var isFinished = false
        var perSession: [String: [Int: AsyncStream<SessionState>.Continuation]] = [:]
        var perSessionEvents: [String: [Int: AsyncStream<SessionEvent>.Continuation]] = [:]
        var all: [Int: AsyncStream<SessionEvent>.Continuation] = [:]
        /// The all-sessions streams that dropped an event already (each is warned of once).
        var allDropping: Set<Int> = []
    }

    private let observers = Mutex(Observers())
    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
    }

    /// A stream that first yields `current()` and then every change of `session`.
    func stream(for session: String, current: SessionState) -> AsyncStream<SessionState> {
        let (stream, continuation) = AsyncStream.makeStream(of: SessionState.self, bufferingPolicy: .bufferingNewest(64))
        let id = observers.withLock { state -> Int? in
            guard !state.isFinished else { return nil }
            state.nextId += 1
            state.perSession[session, default: [:]][state.nextId] = continuation
            return state.nextId
        }
        continuation.yield(current)
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            self?.observers.withLock { state in
                state.perSession[session]?[id] = nil
                if state.perSession[session]?.isEmpty == true { state.perSession[session] = nil }
            }
        }
        return stream
    }

    /// A stream that first yields `current` (as a state change) and then every event of `session`.
    func eventStream(for session: String, current: SessionState) -> AsyncStream<SessionEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: SessionEvent.self, bufferingPolicy: .bufferingNewest(64))
        let id = observers.withLock { state -> Int? in
            guard !state.isFinished else { return nil }
            state.nextId += 1
            state.perSessionEvents[session, default: [:]][state.nextId] = continuation
            return state.nextId
        }
        continuation.yield(SessionEvent(session: session, state: current))
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            self?.observers.withLock { state in
                state.perSessionEvents[session]?[id] = nil
                if state.perSessionEvents[session]?.isEmpty == true { state.perSessionEvents[session] = nil }
            }
        }
        return stream
    }

    /// A stream of every session's changes from now on.
    func streamForAll() -> AsyncStream<SessionEvent> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: SessionEvent.self, bufferingPolicy: .bufferingNewest(FederationClient.allStateUpdatesBufferSize))
        let id = observers.withLock { state -> Int? in
            guard !state.isFinished else { return nil }
            state.nextId += 1
            state.all[state.nextId] = continuation
            return state.nextId
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            self?.observers.withLock { state in
                state.all[id] = nil
                state.allDropping.remove(id)
            }
        }
        return stream
    }

    /// Delivers `state` of `session` to its observers and the all-sessions observers.
    func publish(_ state: SessionState, session: String) {
        let stateObservers = observers.withLock { $0.perSession[session].map { Array($0.values) } ?? [] }
        for observer in stateObservers { observer.yield(state) }
        deliver(SessionEvent(session: session, state: state))
    }

    /// Delivers a renewal reminder for `session` to its event observers and the all-sessions observers.
    func remind(session: String, expiresAt: Date) {
        deliver(SessionEvent(session: session, state: .federated, kind: .renewalDue(expiresAt: expiresAt)))
    }

    private func deliver(_ event: SessionEvent) {
        let (eventObservers, allObservers) = observers.withLock { observers in
            (observers.perSessionEvents[event.session].map { Array($0.values) } ?? [], observers.all)
        }
        for observer in eventObservers { observer.yield(event) }
        for (id, observer) in allObservers {
            guard case .dropped = observer.yield(event) else { continue }
            // A consumer that fell behind loses events silently otherwise; its per-session
            // peers keep only states, where the newest is what matters.
            guard observers.withLock({ $0.all[id] != nil && $0.allDropping.insert(id).inserted }) else { continue }
            logger.warning(
                "an observer of every session fell \(FederationClient.allStateUpdatesBufferSize) events behind: the oldest are being dropped; read the stream faster, or re-read sessions with session(_:)",
                metadata: ["broker.stream": "allStateUpdates"])
        }
    }

    /// Whether a renewal reminder of `session` would reach anyone: an observer of its events
    /// or of every session's.
    func remindersReach(_ session: String) -> Bool {
        observers.withLock { $0.perSessionEvents[session]?.isEmpty == false || !$0.all.isEmpty }
    }

    /// Whether `session` has an observer of its own.
    func isObserved(_ session: String) -> Bool {
        observers.withLock { $0.perSession[session] != nil || $0.perSessionEvents[session] != nil }
    }

    /// Every session with an observer of its own.
    func observedSessions() -> Set<String> {
        observers.withLock { Set($0.perSession.keys).union($0.perSessionEvents.keys) }
    }

    /// Whether anyone observes every session.
    var hasObserversOfAll: Bool {
        observers.withLock { !$0.all.isEmpty }
    }

    /// Ends every stream, and every stream made from now on once it yielded its first element.
    func finishAll() {
        let (sessionObservers, allObservers) = observers.withLock { observers in
            let result = (observers.perSession.values.flatMap(\.values), Array(observers.all.values) + observers.perSessionEvents.values.flatMap(\.values))
            observers = Observers(nextId: observers.nextId, isFinished: true)
            return result
        }
        for observer in sessionObservers { observer.finish() }
        for observer in allObservers { observer.finish() }
    }
}
