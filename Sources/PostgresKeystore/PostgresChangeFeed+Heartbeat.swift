import Logging
import PostgresNIO
import Synchronization

/// The change feed's check that its listening connection still hears notifications.
///
/// A connection can stay open and answer statements while notifications no longer reach it:
/// left on a server the pool no longer writes to (a failover that moved the address), behind
/// a pooler in transaction mode (which does not carry `LISTEN`). A connection can also stay
/// open and carry nothing (a NAT or firewall that dropped the flow, a server host gone without
/// a word). Neither reports an error, and clients would never hear of other instances'
/// changes again. So every ``PostgresKeystore/Configuration/changeFeedHeartbeat`` the
/// listener must have heard a notification on the channel (this instance's commits, or
/// another instance's commits or checks), or hear a `NOTIFY` the check commits through the
/// pool for the purpose; one that does not is closed, and the feed reconnects and reports
/// ``KeystoreChange/all``.
///
/// Another instance's notification counts: it was committed on the server the listener
/// hears, and nothing can be committed on a standby, so what a listener left on a demoted
/// primary or behind a pooler in transaction mode hears is nothing at all. Counting it is
/// what keeps a fleet's checks from growing with its square: one idle instance's `NOTIFY`
/// reaches every listener and passes every check that falls within the next interval, and
/// the checks' pauses are spread (half to all of the interval) so that idle instances do not
/// all send at once. Still, every ``checksPassedOnOthersAlone`` + 1 checks at least one must
/// hear this instance's own commit or check: a listener left on a server that other
/// instances still write to while this one's pool writes to another (a failover that did
/// not fence the old primary) is found that way.
extension PostgresChangeFeed {
    /// What one listening connection has heard, shared by its listener callback (on the
    /// event loop) and its checks.
    final class Heartbeat: Sendable {
        private struct Wait {
            var expected: String?
            var arrived = false
        }
        private let wait = Mutex(Wait())
        private let somethingHeard = Atomic<Bool>(false)
        private let ownCommitHeard = Atomic<Bool>(false)
        private let listening = Atomic<Bool>(false)
        private let closedDeaf = Atomic<Bool>(false)

        /// Notes a notification on the channel (on the event loop, for every one: one
        /// relaxed store).
        func heardSomething() {
            somethingHeard.store(true, ordering: .relaxed)
        }

        /// Notes one of this instance's commit notifications (on the event loop).
        func heardOwnCommit() {
            ownCommitHeard.store(true, ordering: .relaxed)
        }

        /// Notes one of this instance's heartbeat notifications.
        func heard(_ payload: String) {
            wait.withLock { wait in
                if let expected = wait.expected, payload.utf8.elementsEqual(expected.utf8) { wait.arrived = true }
            }
        }

        /// The server reports the connection listening.
        func listenTookEffect() { listening.store(true, ordering: .releasing) }
        var isListening: Bool { listening.load(ordering: .acquiring) }

        /// Whether a notification arrived since the last call.
        func takeSomethingHeard() -> Bool { somethingHeard.exchange(false, ordering: .relaxed) }

        /// Whether one of this instance's commits was heard since the last call.
        func takeOwnCommitHeard() -> Bool { ownCommitHeard.exchange(false, ordering: .relaxed) }

        func expect(_ payload: String) { wait.withLock { $0 = Wait(expected: payload) } }
        var arrived: Bool { wait.withLock { $0.arrived } }

        /// Whether the check closed the connection because it heard nothing (it answers:
        /// the server is there, and the pool need not watch for it).
        var closedAsDeaf: Bool { closedDeaf.load(ordering: .acquiring) }
        func closingAsDeaf() { closedDeaf.store(true, ordering: .releasing) }
    }

    /// Checks every `interval` (each pause drawn between half of it and all of it) that
    /// `connection` hears notifications, and closes it when it does not (which ends the
    /// listening loop with an error, so the feed reconnects). Returns when cancelled or once
    /// it closed the connection.
    ///
    /// Once `LISTEN` took effect, a check passes at once when a notification was heard since
    /// the last one (a busy fleet sends no checks of its own); otherwise it
    /// commits a heartbeat `NOTIFY` through the pool, which must arrive. When that `NOTIFY`
    /// cannot be committed (the server is away, the pool has no connection to spare), and
    /// before `LISTEN` took effect, the connection must at least answer a `SELECT 1`. Each
    /// check ends within twice the operation timeout: a busy server is not a dead connection,
    /// and each needless reconnect makes every client re-read what it holds.
    func closeWhenDeaf(_ connection: PostgresConnection, every interval: Duration, heartbeat: Heartbeat) async {
        var passedOnOthers = 0
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval * Double.random(in: 0.5...1)) } catch { return }
            let deadline = ContinuousClock.now.advanced(by: configuration.operationTimeout * 2)
            var heard: Bool?
            if heartbeat.isListening {
                let ownCommit = heartbeat.takeOwnCommitHeard()
                let something = heartbeat.takeSomethingHeard()
                if ownCommit {
                    passedOnOthers = 0
                    heard = true
                } else if something && passedOnOthers < Self.checksPassedOnOthersAlone {
                    passedOnOthers += 1
                    heartbeatChecksPassedOnOthers.add(1, ordering: .relaxed)
                    heard = true
                } else {
                    heard = await notificationArrives(heartbeat, until: deadline)
                    if heard == true { passedOnOthers = 0 }
                    // Its own arrival proves this check, not the next one.
                    _ = heartbeat.takeSomethingHeard()
                    if heard != nil { heartbeatsSent.add(1, ordering: .relaxed) }
                }
                heartbeatChecks.add(1, ordering: .relaxed)
            }
            guard !Task.isCancelled else { return }
            switch heard {
            case true?:
                continue
            case false?:
                logger.warning(
                    "keystore change feed: its own notification did not reach the listening connection; reconnecting (a pooler in transaction mode does not carry LISTEN)",
                    metadata: ["broker.endpoint": "\(configuration.endpoint)"])
                heartbeat.closingAsDeaf()
                try? await connection.close()
                return
            case nil:
                guard await answers(connection, until: deadline) || Task.isCancelled else {
                    logger.debug("keystore change feed's connection stopped answering; reconnecting", metadata: ["broker.endpoint": "\(configuration.endpoint)"])
                    return
                }
            }
        }
    }

    /// How many checks in a row may pass on other instances' notifications alone.
    static let checksPassedOnOthersAlone = 5

    /// Commits a heartbeat notification through the pool and waits until `deadline` for the
    /// listener to hear it; `nil` when it could not be committed.
    private func notificationArrives(_ heartbeat: Heartbeat, until deadline: ContinuousClock.Instant) async -> Bool? {
        let payload = heartbeatHeader + String(UInt64.random(in: .min ... .max), radix: 16)
        // Expected before it is sent: it may arrive before the statement's answer.
        heartbeat.expect(payload)
        do {
            try await PostgresKeystore.perform(
                "sending the change feed's heartbeat", pool: pool, deadlines: deadlines, probing: true, logger: logger
            ) { connection, logger in
                try await connection.runUnlessClosed("SELECT pg_catalog.pg_notify(\(PostgresSchema.channel), \(payload))", logger: logger)
            }
        } catch {
            return nil
        }
        var pause: Duration = .milliseconds(1)
        while ContinuousClock.now < deadline {
            if heartbeat.arrived { return true }
            do { try await Task.sleep(for: pause) } catch { return nil }
            pause = min(pause * 2, .milliseconds(100))
        }
        return heartbeat.arrived
    }

    /// Whether `connection` answers a `SELECT 1` by `deadline`, or within an operation
    /// timeout when less is left (a `NOTIFY` that failed may have used most of the check's
    /// time); closes it when it does not, or when cancelled first.
    private func answers(_ connection: PostgresConnection, until deadline: ContinuousClock.Instant) async -> Bool {
        let wait = max(deadline - .now, configuration.operationTimeout)
        // The query cannot be cancelled, so the timeout closes the connection itself, which
        // ends the query too; the group then finishes.
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask { [logger] in (try? await connection.runUnlessClosed("SELECT 1", logger: logger)) != nil }
            group.addTask {
                try? await Task.sleep(for: wait)
                return false
            }
            let first = await group.next() ?? false
            // Unanswered when the check is cancelled too (the listener is leaving): the query
            // must not outlive the check on a connection going back to the pool, nor hold
            // the listener, which waits for its checks, for as long as a dead path lasts.
            if !first { try? await connection.close() }
            group.cancelAll()
            return first
        }
    }
}
