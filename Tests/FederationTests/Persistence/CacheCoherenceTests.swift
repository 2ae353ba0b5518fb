import BrokerTestSupport
@testable import Federation
import Foundation
import SecureStorage
import XCTest

/// The client's cache against the store it caches, where reads, the change feed, local
/// writes and eviction interleave: a read never caches what a change replaced, a clear is
/// never undone by a reload that read before it, and neither an outage nor a full cache
/// leaves a session reading wrong once the store can be read again.
final class CacheCoherenceTests: KeystoreRootTestCase {
    private let key = [UInt8](repeating: 5, count: 32)

    /// A keystore instance of its own, as another process would have.
    private func keystore() throws -> SQLiteKeystore {
        try SQLiteKeystore(
            root: root, service: "coherence-tests", keySource: .raw(key),
            configuration: SQLiteKeystore.Configuration(changePollInterval: .milliseconds(20)))
    }

    private func client(
        _ keystore: any Keystore, cacheCapacity: Int = FederationConfiguration.defaultSessionCacheCapacity, lifetime: TimeInterval = 3600
    ) throws -> FederationClient {
        var configuration = FederationConfiguration(identityPoolId: testPoolId, endpoint: testEndpoint)
        configuration.sessionCacheCapacity = cacheCapacity
        return try FederationClient(
            configuration: configuration,
            transport: FakeCognito(expiration: Date().addingTimeInterval(lifetime)).transport,
            keystore: keystore, environment: [:], retryRunner: noSleepRunner(), now: { Date() }, logger: nil)
    }

    /// Gives the other instance's change feed (polling every 20 ms) time to report.
    private func letTheFeedReport() async throws {
        try await Task.sleep(for: .milliseconds(400))
    }

    /// A client A on a keystore the test can script, and a client B on another instance of
    /// the same store, as another process would have.
    private func spiedClientAndAnother() throws -> (spy: ScriptableKeystore, a: FederationClient, b: FederationClient) {
        let spy = ScriptableKeystore(wrapping: try keystore())
        return (spy, try client(spy), try client(keystore()))
    }

    /// Whether `client` reads `session` in `state` within `timeout`.
    private func eventuallyReads(
        _ client: FederationClient, _ session: String, _ state: SessionState, within timeout: Duration
    ) async -> Bool {
        await eventually(timeout: timeout) { (try? await client.session(session).state) == state }
    }

    /// Waits until the call `gate` holds has read or committed; fails the test (rather than
    /// hang it) when it does not.
    private func reach(_ gate: ScriptableKeystore.CallGate, file: StaticString = #filePath, line: UInt = #line) async throws {
        guard await gate.arrived() else {
            XCTFail("the held call never came", file: file, line: line)
            throw CancellationError()
        }
    }

    func testAFirstReadDuringWhichAnotherClientClearsIsNotCachedAsItWas() async throws {
        let other = try client(keystore())
        try await other.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let spy = ScriptableKeystore(wrapping: try keystore())
        let reader = try client(spy)
        _ = try await reader.session("bob")  // starts the reader's change feed

        let gate = spy.holdNextRead(ofKey: "session.alice")
        let firstRead = Task { try await reader.session("alice") }
        try await reach(gate)  // the read holds alice as federated
        try await other.clear(session: "alice")
        try await letTheFeedReport()  // the feed reports the clear while the read is held
        gate.release()
        _ = try await firstRead.value

        let current = await eventuallyReads(reader, "alice", .notFederated, within: .seconds(3))
        XCTAssertTrue(current, "a read that raced a clear must not keep the cleared session")
    }

    func testALocalClearIsNotUndoneByAReloadThatReadBeforeIt() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        let a = try client(spy)
        let before = try await a.session("alice")
        XCTAssertEqual(before.state, .notFederated)  // cached as absent, followed by the feed

        let gate = spy.holdNextRead(ofKey: "session.alice")
        let b = try client(keystore())
        try await b.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        try await reach(gate)  // A's feed reloads alice and has read B's federation
        try await a.clear(session: "alice")
        gate.release()
        try await letTheFeedReport()

        let afterClear = try await a.session("alice")
        XCTAssertEqual(afterClear.state, .notFederated, "the reload read before the clear: the clear stands")
        let stored = try await keystore().value(forKey: "session.alice")
        XCTAssertNil(stored)
    }

    func testAFailedReloadIsTriedAgainOnceTheStoreAnswers() async throws {
        let (spy, a, b) = try spiedClientAndAnother()
        let result = try await b.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let cached = try await a.session("alice")
        XCTAssertEqual(cached.state, .federated)
        try await letTheFeedReport()  // A's feed has reported B's federation and reloaded it

        spy.setUnreachable(true)
        let readsBefore = spy.counts.reads(of: "session.alice")
        try await b.clear(session: "alice")
        let tried = await eventually { spy.counts.reads(of: "session.alice") > readsBefore }
        XCTAssertTrue(tried, "A's feed tried to reload alice while the store was unreachable")
        let duringOutage = try await a.credentials(for: "alice")
        XCTAssertEqual(duringOutage, result.credentials, "cached valid credentials are served while the store cannot be read")

        spy.setUnreachable(false)
        let recovered = await eventuallyReads(a, "alice", .notFederated, within: .seconds(3))
        XCTAssertTrue(recovered, "once the store answers, the change the failed reload missed is read")
    }

    func testObservingASessionDuringAnOutageLeavesNoEmptyEntryBehind() async throws {
        let writer = try client(keystore())
        try await writer.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let spy = ScriptableKeystore(wrapping: try keystore())
        let observer = try client(spy)

        spy.setUnreachable(true)
        let events = await observer.events(for: "alice")
        var iterator = events.makeAsyncIterator()
        let first = await iterator.next()
        XCTAssertEqual(first?.state, .notFederated, "an unreadable session reads notFederated to a new observer")
        spy.setUnreachable(false)

        let snapshot = try await observer.session("alice")
        XCTAssertEqual(snapshot.state, .federated, "once the store answers, the saved session is read")
        await assertThrows(FederationError.self, code: .sessionConflict) {
            try await observer.federateAsGuest(session: "alice")
        }
    }

    func testAFirstReadIsNotEvictedByItsOwnEntryWhenPinnedSessionsFillTheCache() async throws {
        let client = try client(try keystore(), cacheCapacity: 1)
        try await client.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let observed = await client.stateUpdates(for: "bob")  // pins bob, evicting alice
        _ = observed
        let alice = try await client.session("alice")
        XCTAssertEqual(alice.state, .federated, "alice is read from the store and answered, though bob fills the cache")
        let credentials = try await client.credentials(for: "alice")
        XCTAssertEqual(credentials, alice.credentials)
    }

    /// A clear whose commit applied but whose answer was lost (a timeout, a dropped
    /// connection): the caller gets the error, and the client does not go on serving the
    /// session it cleared (its own commits never come back through its feed).
    func testAWriteWhoseOutcomeWasLostIsReadBackFromTheStore() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(spy)
        try await client.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        spy.setFailAfterWrites(true)
        await assertThrows(FederationError.self, code: .storage) { try await client.clear(session: "alice") }
        spy.setFailAfterWrites(false)
        let readBack = await eventuallyReads(client, "alice", .notFederated, within: .seconds(3))
        XCTAssertTrue(readBack, "the client reads what the store holds after a write with a lost outcome")
    }

    /// How long the client keeps re-reading a session after a write whose outcome is unknown
    /// is the keystore's own bound (`uncertainCommitWindow`), not a fixed minute: a store
    /// whose commits may land later (a long PostgreSQL operation timeout) gets a longer watch,
    /// and one that reports a short bound is not re-read past it.
    func testTheUncertainWindowAfterALostWriteIsTheKeystoresOwn() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        spy.setUncertainCommitWindow(.seconds(2))
        let client = try client(spy)
        try await client.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        spy.setFailAfterWrites(true)
        await assertThrows(FederationError.self, code: .storage) { try await client.clear(session: "alice") }
        let afterFailure = ContinuousClock.now
        spy.setFailAfterWrites(false)

        // Within the window, reads keep re-reading the store.
        let readsAtFailure = spy.counts.reads(of: "session.alice")
        let reReading = await eventually(timeout: .milliseconds(1500)) {
            _ = try? await client.session("alice")
            return spy.counts.reads(of: "session.alice") >= readsAtFailure + 2
        }
        XCTAssertTrue(reReading, "reads re-read the store during the window")
        // Past it (it started before `afterFailure`), the cache answers alone.
        try await Task.sleep(until: afterFailure + .milliseconds(2600))
        _ = try await client.session("alice")
        try await Task.sleep(for: .milliseconds(300))
        let readsAfterWindow = spy.counts.reads(of: "session.alice")
        for _ in 0..<5 {
            _ = try await client.session("alice")
            try await Task.sleep(for: .milliseconds(250))
        }
        XCTAssertEqual(spy.counts.reads(of: "session.alice"), readsAfterWindow, "the store was re-read after the keystore's window ended")
        let state = try await client.session("alice").state
        XCTAssertEqual(state, .notFederated, "the clear that applied was read back")

        // A store whose commits may land an hour later is watched for that hour, whether the
        // session is cached or not (no fixed cap).
        spy.setUncertainCommitWindow(.seconds(3600))
        try await client.federate(token: TestJWT.valid(sub: "bob"), provider: .google, session: "bob")
        spy.setFailAfterWrites(true)
        await assertThrows(FederationError.self, code: .storage) { try await client.clear(session: "bob") }
        await assertThrows(FederationError.self, code: .storage) { try await client.clear(session: "carol") }
        spy.setFailAfterWrites(false)
        let longFailure = ContinuousClock.now
        for session in ["bob", "carol"] {
            let watched = await client.uncertainUntil(session)
            let until = try XCTUnwrap(watched, "\(session) is not watched")
            XCTAssertGreaterThan(until, longFailure + .seconds(3590), "\(session)'s watch was cut short of the keystore's window")
        }
    }

    /// `.all` (after a reconnect, an overflowing buffer, or from anyone who may `NOTIFY` on a
    /// PostgreSQL database) makes the client re-read every session it holds, so a change it
    /// missed is read. Several sessions at a time, and a flood of `.all` costs one more
    /// re-read, not one each: it used to re-read the whole cache once per `.all`, one session
    /// at a time, holding up the feed's later changes meanwhile.
    func testAFloodOfReloadEverythingCostsOneMoreReReadNotOneEach() async throws {
        let store = try keystore()
        let spy = ScriptableKeystore(wrapping: store)
        let client = try client(spy)
        let other = try self.client(store)
        let sessions = ["alice", "bob", "carol", "dave"]
        for session in sessions {
            try await client.federate(token: TestJWT.valid(sub: session), provider: .google, session: session)
        }
        // The feed loses track: a clear elsewhere is not reported.
        spy.setDropsStoreChanges(true)
        try await other.clear(session: "alice")
        try await Task.sleep(for: .milliseconds(200))
        let stale = try await client.session("alice").state
        XCTAssertEqual(stale, .federated, "the test's feed dropped the clear")

        // Reads long enough that all 50 arrive while the first re-read runs, even on a loaded
        // machine.
        spy.setReadDelay(.milliseconds(400))
        let readsBefore = spy.counts.reads(of: "session.bob")
        for _ in 0..<50 { spy.inject(.all) }
        let cleared = await eventuallyReads(client, "alice", .notFederated, within: .seconds(5))
        XCTAssertTrue(cleared, "after .all the client read the clear it had missed")
        // Long enough for several passes, had each .all made one, and for a third one, had
        // any .all come after the first pass ended (the second starts a second after it).
        try await Task.sleep(for: .milliseconds(2_500))
        let reads = spy.counts.reads(of: "session.bob") - readsBefore
        XCTAssertGreaterThanOrEqual(reads, 1, "bob was re-read")
        XCTAssertLessThanOrEqual(reads, 2, "50 .all cost \(reads) re-reads of one session")
        XCTAssertGreaterThan(spy.counts.mostConcurrentReads, 1, "the sessions were re-read one at a time")
    }

    /// A local clear is not undone by a first read that read before it, even when the entry
    /// the clear left is evicted before that read returns: the read reads again.
    func testALocalClearIsNotUndoneByAFirstReadWhenTheEntryIsEvictedMeanwhile() async throws {
        let other = try client(keystore())
        try await other.federate(token: TestJWT.valid(sub: "x"), provider: .google, session: "x")
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(spy, cacheCapacity: 2)

        let gate = spy.holdNextRead(ofKey: "session.x")
        let firstRead = Task { try await client.session("x") }
        try await reach(gate)  // the read holds x as federated
        try await client.clear(session: "x")
        for session in ["a", "b", "c"] { _ = try await client.session(session) }  // x is evicted
        gate.release()
        _ = try await firstRead.value

        let state = try await client.session("x").state
        XCTAssertEqual(state, .notFederated, "a read that began before the clear cached the cleared session")
    }

    /// A re-read of the store through `credentialsReadingStore` that a change raced, for a
    /// session not cached, is not cached as it read: the change it missed would never
    /// correct it (the feed ignores sessions nobody follows).
    func testAStoreFirstReadRacedByAChangeIsNotCachedAsItRead() async throws {
        let other = try client(keystore())
        try await other.federate(token: TestJWT.valid(sub: "x"), provider: .google, session: "x")
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(spy)
        _ = try await client.session("bob")  // starts the change feed

        let gate = spy.holdNextRead(ofKey: "session.x")
        let read = Task { try? await client.credentialsReadingStore(for: "x") }
        try await reach(gate)  // the read holds x as federated
        try await other.clear(session: "x")
        try await letTheFeedReport()
        gate.release()
        _ = await read.value

        let current = await eventuallyReads(client, "x", .notFederated, within: .seconds(3))
        XCTAssertTrue(current, "the client cached what a raced read returned, and kept it")
    }

    /// A re-read asked for again while the session was cached, which would run after the
    /// session was evicted, reads nothing: nobody follows the session any more, so a change
    /// the feed reported during that read would have been dropped and what it read cached
    /// for good.
    func testAReReadOfASessionEvictedMeanwhileCachesNothing() async throws {
        let other = try client(keystore())
        try await other.federate(token: TestJWT.valid(sub: "x"), provider: .google, session: "x")
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(spy, cacheCapacity: 2)
        _ = try await client.session("x")
        spy.setDropsStoreChanges(true)  // only what the test injects

        // A re-read of everything reads x (outside the feed's loop, which goes on)…
        let first = spy.holdNextRead(ofKey: "session.x")
        spy.inject(.all)
        try await reach(first)
        spy.inject(.item("session.x"))  // …and the feed asks for x again meanwhile
        try await Task.sleep(for: .milliseconds(100))
        for session in ["a", "b", "c"] { _ = try await client.session(session) }  // x is evicted
        let second = spy.holdNextRead(ofKey: "session.x")
        first.release()
        // Were the re-read asked for again to run, it would read x as federated now…
        try await Task.sleep(for: .milliseconds(300))
        // …and the clear it would miss is not reported to a client that holds nothing of x.
        try await other.clear(session: "x")
        second.release()
        try await Task.sleep(for: .milliseconds(300))

        let state = try await client.session("x").state
        XCTAssertEqual(state, .notFederated, "a re-read of an evicted session cached what it read before a change")
    }

    /// The feed names keys from whoever can signal it (any role that can connect may `NOTIFY`
    /// on PostgreSQL; any member writes a shared group): one that names no session a client
    /// could have (a line break, a name too long) is neither read, cached nor announced,
    /// however many come.
    func testChangesNamingNoPossibleSessionAreIgnored() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(spy, cacheCapacity: 2)
        let all = await client.allStateUpdates()
        try await client.federate(token: TestJWT.valid(sub: "a"), provider: .google, session: "alice")
        spy.setDropsStoreChanges(true)  // only what the test injects
        let hostile = ["session.x\n2026-11-29 level=info msg=forged", "session." + String(repeating: "y", count: 129), "session..", "session.é"]
        for key in hostile { spy.inject(.item(key)) }
        spy.inject(.item("session.bob"))  // a real name, after them: the feed went on
        let events = await collect(20, from: all, timeout: .seconds(3))  // bob's comes last, on a busy machine late
        XCTAssertEqual(Set(events.map(\.session)), ["alice", "bob"], "\(events)")
        for key in hostile { XCTAssertEqual(spy.counts.reads(of: key), 0, "read \(key)") }
        let alice = try await client.session("alice").state
        XCTAssertEqual(alice, .federated)
    }

    /// The credential server's read of a session this client does not hold caches what the
    /// store has without announcing it to observers of every session: nothing changed (it
    /// used to announce `federated` for it, again after each eviction).
    func testAStoreFirstReadOfASessionNotHeldAnnouncesNothing() async throws {
        let b = try client(try keystore())
        try await b.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let a = try client(try keystore())
        let all = await a.allStateUpdates()
        let served = try await a.credentialsReadingStore(for: "alice")
        let stored = try await b.credentials(for: "alice")
        XCTAssertEqual(served, stored)
        try await a.federate(token: TestJWT.valid(sub: "bob"), provider: .google, session: "bob")
        // Events come in order from the client's actor: bob's are first when alice's read announced nothing.
        let events = await collect(1, from: all, timeout: .seconds(3))
        XCTAssertEqual(events.map(\.session), ["bob"], "\(events)")
    }

    /// Observing a name no session can have (taken from a request, say) reads nothing, which
    /// would fail and be retried for as long as it is observed: the stream says
    /// `notFederated` and ends.
    func testObservingANameNoSessionCanHaveReadsNothingAndEnds() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(spy)
        let name = "x\n" + String(repeating: "y", count: 200)
        let states = await collect(5, from: await client.stateUpdates(for: name), timeout: .seconds(2))
        XCTAssertEqual(states, [.notFederated])
        let events = await collect(5, from: await client.events(for: name), timeout: .seconds(2))
        XCTAssertEqual(events.map(\.state), [.notFederated])
        try await Task.sleep(for: .milliseconds(200))
        XCTAssertEqual(spy.counts.reads, 0, "the name was read")
    }

    /// An observed session whose re-read failed is read again by the client itself, without
    /// waiting for someone to read it: its observers hear of the change the feed reported.
    func testAFailedReReadOfAnObservedSessionIsRetried() async throws {
        let other = try client(keystore())
        try await other.federate(token: TestJWT.valid(sub: "x"), provider: .google, session: "x")
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(spy)
        let updates = await client.stateUpdates(for: "x")
        let received = Task { await collect(2, from: updates, timeout: .seconds(8)) }

        spy.setUnreachable(true)
        try await other.clear(session: "x")
        try await letTheFeedReport()  // the feed's re-read fails
        spy.setUnreachable(false)

        let states = await received.value
        XCTAssertEqual(states.first, .federated)
        let next = states.dropFirst().first
        XCTAssertEqual(next, .notFederated, "the observer never heard of the clear the failed re-read missed")
    }

    /// Once shutdown returns, the client has no re-read of its own under way and starts
    /// none: the caller may close the keystore. A re-read of everything the feed asked for,
    /// and a background re-read after a write whose outcome is unknown, are both cancelled
    /// and waited for.
    func testShutdownWaitsForTheReReadsItStarted() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(spy)
        for session in ["alice", "bob", "carol"] {
            try await client.federate(token: TestJWT.valid(sub: session), provider: .google, session: session)
        }
        spy.setFailAfterWrites(true)
        await assertThrows(FederationError.self, code: .storage) { try await client.clear(session: "alice") }
        spy.setFailAfterWrites(false)

        // Reads that would outlast the test: only cancellation ends them early.
        spy.setReadDelay(.seconds(30))
        _ = try await client.session("alice")  // answers from the cache, re-reads in the background
        spy.inject(.all)
        let reading = await eventually(timeout: .seconds(3)) { spy.readsInFlight >= 3 }
        XCTAssertTrue(reading, "the background re-read and the re-read of everything are under way (\(spy.readsInFlight))")

        let started = ContinuousClock.now
        await client.shutdown(gracePeriod: .seconds(5))
        XCTAssertEqual(spy.readsInFlight, 0, "shutdown returned with re-reads of its own under way")
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(10), "the re-reads were cancelled, not waited out")

        // Nothing starts afterwards: not the background re-read a read of an uncertain
        // session would start, not a re-read of everything.
        let readsAfter = spy.counts.reads
        _ = try await client.session("alice")
        spy.inject(.all)
        try await Task.sleep(for: .milliseconds(300))
        XCTAssertEqual(spy.counts.reads, readsAfter, "the client read the store on its own after shutdown")
    }

    /// Two re-reads of one session never run side by side: one asked for while another runs
    /// reads again after it. Side by side, the older answer could be applied last and the
    /// newer one then dropped as raced, leaving the cache behind the store for good.
    func testReReadsOfOneSessionAreAppliedInTheOrderTheyRead() async throws {
        let store = try keystore()
        let spy = ScriptableKeystore(wrapping: store)
        let client = try client(spy)
        let other = try self.client(store)
        try await client.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        spy.setDropsStoreChanges(true)

        // A re-read of everything reads the clear another client made, and is held before it
        // applies it.
        try await other.clear(session: "alice")
        let first = spy.holdNextRead(ofKey: "session.alice")
        spy.inject(.all)
        try await reach(first)
        // Meanwhile alice is federated again, and the feed reports it.
        try await other.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let second = spy.holdNextRead(ofKey: "session.alice")
        spy.inject(.item("session.alice"))
        try await Task.sleep(for: .milliseconds(200))
        first.release()
        try await Task.sleep(for: .milliseconds(200))
        second.release()

        let current = await eventuallyReads(client, "alice", .federated, within: .seconds(3))
        XCTAssertTrue(current, "the client kept the older answer (notFederated) although the store holds a federation")
    }

    /// A re-read asked for again and again (anyone may `NOTIFY` a session's key on a
    /// PostgreSQL database) does not hold up whoever started it: here a re-read of
    /// everything, which ends and lets the next `.all` re-read the other sessions while the
    /// asks go on. (Once, its re-read of that session looped for as long as they came.)
    func testAReReadAskedForAgainAndAgainDoesNotHoldUpAReReadOfEverything() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(spy)
        for session in ["alice", "bob"] {
            try await client.federate(token: TestJWT.valid(sub: session), provider: .google, session: session)
        }
        spy.setReadDelay(.milliseconds(100))
        let bobBefore = spy.counts.reads(of: "session.bob")
        spy.inject(.all)
        let flood = Task {
            while !Task.isCancelled {
                spy.inject(.item("session.alice"))
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
        defer { flood.cancel() }
        try await Task.sleep(for: .milliseconds(300))
        spy.inject(.all)
        // The second .all's re-read starts a second after the first's, while the asks go on.
        let reReadAgain = await eventually(timeout: .seconds(10)) { spy.counts.reads(of: "session.bob") >= bobBefore + 2 }
        XCTAssertTrue(reReadAgain, "the second .all re-read nothing while alice was asked for")
    }

    /// A clear that timed out but lands in the store later (a statement queued behind another
    /// on the server): reads made before it lands must not settle the question, and once it
    /// lands the client reads `notFederated`.
    func testAWriteThatLandsAfterItsCallerGaveUpIsReadOnceItLands() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(spy)
        try await client.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        spy.setApplyLate(.milliseconds(800))
        await assertThrows(FederationError.self, code: .storage) { try await client.clear(session: "alice") }
        spy.setApplyLate(nil)
        // Reads before it lands re-read the store, which still holds alice.
        for _ in 0..<5 {
            _ = try await client.session("alice")
            try await Task.sleep(for: .milliseconds(50))
        }
        let landed = await eventuallyReads(client, "alice", .notFederated, within: .seconds(5))
        XCTAssertTrue(landed, "the clear that landed late is read")
    }

    /// The same, with the session evicted before it is read again: the uncertain window
    /// outlives the cache entry, so the read that caches the session again keeps re-reading.
    func testAWriteThatLandsLateIsReadOnceItLandsAfterItsSessionWasEvicted() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        let client = try client(spy, cacheCapacity: 2)
        try await client.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        // Late enough that the reads below come first on a loaded machine.
        spy.setApplyLate(.seconds(3))
        await assertThrows(FederationError.self, code: .storage) { try await client.clear(session: "alice") }
        spy.setApplyLate(nil)
        for session in ["a", "b", "c"] { _ = try await client.session(session) }  // alice is evicted
        let before = try await client.session("alice").state
        XCTAssertEqual(before, .federated, "read again before the clear lands")
        let landed = await eventuallyReads(client, "alice", .notFederated, within: .seconds(10))
        XCTAssertTrue(landed, "the clear that landed late is read")
    }

    // MARK: - This client's writes and reads racing other clients' changes

    /// A's federation races B's, whose credentials last longer and commit first, so A's save
    /// loses and A reads the winner back; B clears the session while that read is under way,
    /// and A's feed applies the clear first. A must end with what the store holds (nothing),
    /// not with the winner it read before the clear.
    func testALostFederationDoesNotReinstateTheWinnerAClearRemovedMeanwhile() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        let a = try client(spy, lifetime: 3600)
        let b = try client(keystore(), lifetime: 7200)
        _ = try await a.session("alice")  // starts A's change feed; alice is not federated

        let commit = spy.holdNextCommitBeforeApplying()
        let federation = Task { try await a.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice") }
        try await reach(commit)  // A's save waits; B's federation races it and commits first
        try await b.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let heard = await eventually(timeout: .seconds(5)) { (try? await a.session("alice"))?.expiration != nil }
        XCTAssertTrue(heard, "A's feed never applied B's federation")
        let gate = spy.holdNextRead(ofKey: "session.alice")
        commit.release()
        try await reach(gate)  // A's save lost; its read-back holds B's federation
        try await b.clear(session: "alice")
        // A's feed has re-read and applied the clear (the state reads `federating` meanwhile).
        let applied = await eventually(timeout: .seconds(5)) { (try? await a.session("alice"))?.expiration == nil }
        XCTAssertTrue(applied, "A's feed never applied B's clear")
        gate.release()
        _ = try await federation.value

        let converged = await eventuallyReads(a, "alice", .notFederated, within: .seconds(3))
        XCTAssertTrue(converged, "A keeps a federation the store no longer holds")
        let stored = try await keystore().value(forKey: "session.alice")
        XCTAssertNil(stored)
    }

    /// A's federation races B's and loses, and A cannot read the winner back (the store went
    /// away after the commit): A keeps what it held and reads the session again, rather than
    /// taking the failed read for an empty store.
    func testALostFederationWhoseWinnerCannotBeReadIsReadAgain() async throws {
        let spy = ScriptableKeystore(wrapping: try keystore())
        let a = try client(spy, lifetime: 3600)
        let b = try client(keystore(), lifetime: 7200)
        _ = try await a.session("alice")  // alice is not federated yet

        let commit = spy.holdNextCommitBeforeApplying()
        let federation = Task { try await a.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice") }
        try await reach(commit)
        try await b.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")  // commits first
        let cached = try await b.session("alice")
        let gate = spy.holdNextCommit()
        commit.release()
        try await reach(gate)  // A's save has lost
        spy.setUnreachable(true)  // the read of the winner fails
        gate.release()
        _ = try await federation.value
        spy.setUnreachable(false)

        let winner = await eventually(timeout: .seconds(3)) {
            guard let snapshot = try? await a.session("alice") else { return false }
            return snapshot.state == .federated && snapshot.expiration == cached.expiration
        }
        XCTAssertTrue(winner, "A took a read that failed for an empty store")
    }

    /// A's clear has committed, but its answer is late; meanwhile B federates the session and
    /// A's feed applies B's federation. When A's clear returns, A must not settle on
    /// `notFederated` while the store holds B's federation, which came after the clear.
    func testALocalClearAnsweredAfterTheFeedAppliedALaterFederationDoesNotHideIt() async throws {
        let (spy, a, b) = try spiedClientAndAnother()
        let before = try await a.session("alice")  // cached as absent; A's feed follows it
        XCTAssertEqual(before.state, .notFederated)

        let gate = spy.holdNextCommit()
        let clearing = Task { try await a.clear(session: "alice") }
        try await reach(gate)  // the clear has committed; its answer is held
        try await b.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let applied = await eventuallyReads(a, "alice", .federated, within: .seconds(5))
        XCTAssertTrue(applied, "A's feed never applied B's federation")
        gate.release()
        try await clearing.value

        let converged = await eventuallyReads(a, "alice", .federated, within: .seconds(3))
        XCTAssertTrue(converged, "A reads notFederated while the store holds B's later federation")
    }

    /// A store-first read (the credential server's) that read a federation the feed then
    /// reported cleared must not apply it after the clear's own re-read: it would serve
    /// credentials of a cleared session.
    func testAStoreFirstReadOfACachedSessionRacedByAChangeIsNotApplied() async throws {
        let (spy, a, b) = try spiedClientAndAnother()
        _ = try await a.session("x")  // cached as absent
        spy.setDropsStoreChanges(true)  // only what the test injects
        try await b.federate(token: TestJWT.valid(sub: "x"), provider: .google, session: "x")

        let gate = spy.holdNextRead(ofKey: "session.x")
        let serving = Task { try await a.credentialsReadingStore(for: "x") }
        try await reach(gate)  // the read holds x as federated
        try await b.clear(session: "x")
        let readsBefore = spy.counts.reads(of: "session.x")
        spy.inject(.item("session.x"))
        // The feed marks the held read raced, then re-reads x (cached), applying the clear.
        let reread = await eventually(timeout: .seconds(5)) { spy.counts.reads(of: "session.x") > readsBefore && spy.readsInFlight <= 1 }
        XCTAssertTrue(reread, "the feed never re-read x")
        try await Task.sleep(for: .milliseconds(50))
        gate.release()

        await assertThrows(FederationError.self, code: .noValidCredentials) { try await serving.value }
        let state = try await a.session("x").state
        XCTAssertEqual(state, .notFederated, "a read that raced the clear was applied after it")
    }

    /// A client whose first call is `clear` follows the store from then on: a federation by
    /// another client sharing the keystore is read.
    func testAClientWhoseFirstCallIsAClearHearsOfLaterChanges() async throws {
        let shared = InMemoryKeystore(service: "coherence-tests")
        let a = try client(shared)
        let b = try client(shared)
        try await a.clear(session: "alice")
        try await b.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let heard = await eventuallyReads(a, "alice", .federated, within: .seconds(3))
        XCTAssertTrue(heard, "A answered notFederated for a session B federated after A's clear")
    }

    /// An observer that subscribed while the store could not be read was told
    /// `notFederated`; once the store answers it learns the saved state, by itself, and
    /// when a read caches the session.
    func testAnObserverWhoSubscribedDuringAnOutageLearnsTheSavedStateOnceTheStoreAnswers() async throws {
        let writer = try client(keystore())
        for session in ["alice", "bob"] {
            try await writer.federate(token: TestJWT.valid(sub: session), provider: .google, session: session)
        }
        let spy = ScriptableKeystore(wrapping: try keystore())
        let observer = try client(spy)

        spy.setUnreachable(true)
        let alice = await observer.stateUpdates(for: "alice")
        let bob = await observer.stateUpdates(for: "bob")
        let aliceStates = Task { await collect(2, from: alice, timeout: .seconds(5)) }
        let bobStates = Task { await collect(2, from: bob, timeout: .seconds(5)) }
        spy.setUnreachable(false)
        // Bob is read by a caller at once; alice by nobody: the client retries by itself.
        _ = try await observer.session("bob")

        let bobSeen = await bobStates.value
        XCTAssertEqual(bobSeen, [.notFederated, .federated], "the read that cached bob did not tell its observer")
        let aliceSeen = await aliceStates.value
        XCTAssertEqual(aliceSeen, [.notFederated, .federated], "alice's observer was never told the saved state")
    }

    /// A first read raced by a change on each of its attempts caches what it read last,
    /// and reads the session again by itself: its observer hears of the change that
    /// replaced what was read, without anyone reading the session.
    func testAFirstReadRacedOnEveryAttemptIsReadAgainByItself() async throws {
        let b = try client(keystore())
        try await b.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let spy = ScriptableKeystore(wrapping: try keystore())
        let a = try client(spy)
        _ = try await a.session("bob")  // starts A's change feed
        spy.setDropsStoreChanges(true)  // only what the test injects

        var gate = spy.holdNextRead(ofKey: "session.alice")
        let observing = Task { await a.stateUpdates(for: "alice") }
        for attempt in 1...FederationClient.firstReadAttempts {
            try await reach(gate)
            let held = gate
            if attempt < FederationClient.firstReadAttempts {
                gate = spy.holdNextRead(ofKey: "session.alice")
            } else {
                try await b.clear(session: "alice")  // what the last attempt read is replaced
            }
            spy.inject(.item("session.alice"))
            let marked = await eventually(timeout: .seconds(5)) { await a.callsInFlight.reportedChanges(of: "alice") > 0 }
            XCTAssertTrue(marked, "the feed never marked the read raced")
            held.release()
        }
        let updates = await observing.value
        let states = await collect(2, from: updates, timeout: .seconds(3))
        XCTAssertEqual(states, [.federated, .notFederated], "the read raced on every attempt was never read again")
    }

    /// A background re-read that began inside a lost write's uncertain window and ended
    /// after it does not close the window: the write may have landed after that read.
    func testAReReadThatBeganInsideTheUncertainWindowDoesNotCloseIt() async throws {
        let window = Duration.seconds(1)
        let spy = ScriptableKeystore(wrapping: try keystore())
        spy.setUncertainCommitWindow(window)
        let client = try client(spy)
        try await client.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let gate = spy.holdNextRead(ofKey: "session.alice")
        spy.setApplyLate(.milliseconds(500))
        await assertThrows(FederationError.self, code: .storage) { try await client.clear(session: "alice") }
        let failedAt = ContinuousClock.now
        spy.setApplyLate(nil)

        _ = try await client.session("alice")  // answers from the cache; re-reads in the background
        try await reach(gate)  // the re-read read alice before the clear landed
        let other = try keystore()
        let landed = await eventually(timeout: .seconds(5)) {
            do { return try await other.value(forKey: "session.alice") == nil } catch { return false }
        }
        XCTAssertTrue(landed, "the clear never landed")
        try await Task.sleep(until: failedAt + window + .milliseconds(50))  // the window has ended
        gate.release()
        // The re-read applies what it read before anyone reads again (a read meanwhile would
        // ask it to read once more).
        let applied = await eventually(timeout: .seconds(5)) { await client.reloadsAskedAgain["alice"] == nil }
        XCTAssertTrue(applied)

        let read = await eventuallyReads(client, "alice", .notFederated, within: .seconds(3))
        XCTAssertTrue(read, "a re-read that began before the clear landed closed the uncertain window")
    }

    /// A stream of `.all`s (a feed's buffer overflowing under load, or anyone who may
    /// `NOTIFY` on a PostgreSQL database) that marks every re-read raced must not keep a
    /// cached session from being updated: a re-read is applied, and the next one follows.
    func testAStreamOfChangesDoesNotKeepACachedSessionFromBeingUpdated() async throws {
        let (spy, a, b) = try spiedClientAndAnother()
        try await b.federate(token: TestJWT.valid(sub: "alice"), provider: .google, session: "alice")
        let cached = try await a.session("alice")
        XCTAssertEqual(cached.state, .federated)
        spy.setDropsStoreChanges(true)  // only what the test injects
        spy.setReadDelay(.milliseconds(50))  // every re-read outlasts several `.all`s
        try await b.clear(session: "alice")

        let storm = Task {
            while !Task.isCancelled {
                spy.inject(.all)
                try? await Task.sleep(for: .milliseconds(5))
            }
        }
        defer { storm.cancel() }
        let updated = await eventuallyReads(a, "alice", .notFederated, within: .seconds(5))
        XCTAssertTrue(updated, "re-reads raced by the stream of changes were never applied")
    }

    /// A re-read dropped because a write of the session failed with its outcome unknown
    /// (which asks for no re-read of its own) is read again: the session's observer hears
    /// of the change the dropped re-read was for, without anyone reading the session.
    func testAReReadDroppedForAWriteWhoseOutcomeIsUnknownIsReadAgain() async throws {
        let (spy, a, b) = try spiedClientAndAnother()
        let updates = await a.stateUpdates(for: "x")  // cached as absent, observed
        let states = Task { await collect(2, from: updates, timeout: .seconds(5)) }
        spy.setDropsStoreChanges(true)  // only what the test injects
        try await b.federate(token: TestJWT.valid(sub: "x"), provider: .google, session: "x")

        let gate = spy.holdNextRead(ofKey: "session.x")
        spy.inject(.item("session.x"))
        try await reach(gate)  // A's feed has re-read x as federated
        spy.setFailWrites(true)
        await assertThrows(FederationError.self, code: .storage) { try await a.clear(session: "x") }
        spy.setFailWrites(false)
        gate.release()  // dropped: the failed clear may still land

        let seen = await states.value
        XCTAssertEqual(seen, [.notFederated, .federated], "the dropped re-read was never read again")
    }

    /// The same for a session followed but not cached (an observer's, whose first read
    /// failed): its re-reads in the background, raced by every `.all`, are applied, so the
    /// observer hears of the saved state.
    func testAReReadOfAnUncachedFollowedSessionIsAppliedUnderAStreamOfChanges() async throws {
        let (spy, a, b) = try spiedClientAndAnother()
        try await b.federate(token: TestJWT.valid(sub: "x"), provider: .google, session: "x")
        spy.setUnreachable(true)
        let updates = await a.stateUpdates(for: "x")  // notFederated; the client retries by itself
        let states = Task { await collect(2, from: updates, timeout: .seconds(8)) }
        spy.setUnreachable(false)
        spy.setDropsStoreChanges(true)  // only what the test injects
        spy.setReadDelay(.milliseconds(50))  // every re-read outlasts several `.all`s

        let storm = Task {
            while !Task.isCancelled {
                spy.inject(.all)
                try? await Task.sleep(for: .milliseconds(5))
            }
        }
        defer { storm.cancel() }
        let seen = await states.value
        XCTAssertEqual(seen, [.notFederated, .federated], "the raced re-reads of x were never applied")
    }
}

extension FederationClient {
    /// Until when reads of `session` re-read the store after a write whose outcome is
    /// unknown (cached or not), `nil` when they do not.
    fileprivate func uncertainUntil(_ session: String) -> ContinuousClock.Instant? {
        cache.peek(session)?.uncertainUntil ?? uncertainWrites[session]
    }
}
