// sample-observe: watch session states change, like listening to Amplify's Hub auth events.
//
// Subscribes to every session's changes (`allStateUpdates()`) and to one session's
// (`stateUpdates(for:)`), federates a few guest sessions at once, clears one, and waits:
// the others are announced `expired` when their credentials pass expiration minus the
// margin, without anyone reading them. Nothing refreshes them; that is the caller's call.
//
//   sample-observe --endpoint http://127.0.0.1:5000/ --pool-id us-east-1:… --expiry-margin 88
//
// The pool must allow unauthenticated identities. moto issues 90 s credentials, so a margin
// of 88 s (the default here) makes them expire about 2 s after issue.
// Prints each step and event; never a secret key or session token.

import ArgumentParser
import Federation
import Foundation
import SampleSupport

@main
struct ObserveSessions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample-observe",
        abstract: "Print every session state change: federating, federated, cleared, expired."
    )

    @OptionGroup var options: SampleOptions

    @Option(help: "How many guest sessions to federate at once.")
    var sessions = 3

    // Not ExpiryMarginOptions: this flow wants credentials that expire within seconds.
    @Option(help: "Credentials count as expired this many seconds early; 88 makes moto's 90 s credentials expire in ~2 s.")
    var expiryMargin: Double = 88

    @Option(help: "Give up after this many seconds.")
    var timeout: Double = 60

    func validate() throws {
        guard sessions >= 2 else { throw ValidationError("--sessions must be at least 2") }
        try ExpiryMarginOptions.check(expiryMargin)
        guard timeout.isFinite, (1...3_600).contains(timeout) else {
            throw ValidationError("--timeout must be a number of seconds from 1 to 3600")
        }
    }

    func run() async throws {
        let client = try FederationClient(
            configuration: options.configuration(expiryMargin: expiryMargin),
            logger: options.logger(label: "sample-observe")
        )
        var steps = StepPrinter()
        let names = (1...sessions).map { "visitor-\($0)" }
        let watched = names[0]
        let start = ContinuousClock.now
        let timeout = self.timeout
        let watchdog = Task {
            try await Task.sleep(for: .milliseconds(Int64(timeout * 1000)))
            print("timed out after \(timeout) s waiting for state changes")
            Foundation.exit(1)
        }
        defer { watchdog.cancel() }

        steps.next("Subscribe to allStateUpdates() and to stateUpdates(for: \"\(watched)\")")
        var events = await client.allStateUpdates().makeAsyncIterator()
        let watchedStates = await client.stateUpdates(for: watched)

        // Prints events until `done` holds for the latest state of every session in `sessions`.
        var latest: [String: SessionState] = [:]
        func printEvents(until sessions: [String], reach done: (SessionState) -> Bool) async {
            while !sessions.allSatisfy({ latest[$0].map(done) ?? false }), let event = await events.next() {
                let elapsed = (ContinuousClock.now - start).components
                let at = String(format: "%.1f", Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18)
                // A renewal reminder comes on this stream too, with the state still `federated`.
                if case .renewalDue(let expiresAt) = event.kind {
                    steps.detail("event at +\(at) s: \(event.session) renewal due (reads expired at \(expiresAt)); this sample lets it expire")
                    continue
                }
                latest[event.session] = event.state
                steps.detail("event at +\(at) s: \(event.session) -> \(event.state)")
            }
        }

        steps.next("Federate \(sessions) guest sessions concurrently")
        try await withThrowingTaskGroup(of: FederationResult.self) { group in
            for name in names {
                group.addTask { try await client.federateAsGuest(session: name) }
            }
            for try await result in group {
                steps.detail("got identity \(result.identityId), access key ID \(result.credentials.accessKeyId)")
            }
        }
        await printEvents(until: names) { $0 == .federated || $0 == .expired }

        let cleared = names[names.count - 1]
        steps.next("Clear \(cleared)")
        try await client.clear(session: cleared)
        await printEvents(until: [cleared]) { $0 == .notFederated }

        let remaining = Array(names.dropLast())
        steps.next("Wait, reading nothing: expiry is announced, and nothing is refreshed")
        await printEvents(until: remaining) { $0 == .expired }

        steps.next("Read \(watched)")
        let snapshot = try await client.session(watched)
        steps.detail("state: \(snapshot.state), credentials: \(snapshot.credentials == nil ? "none (given out only when federated)" : "present")")
        steps.detail("credentials expire at \(snapshot.expiration.map { "\($0)" } ?? "?"); the \(Int(expiryMargin)) s margin makes them read expired that much earlier")
        steps.detail("to continue, the caller federates a new token (or a new guest call) itself")

        steps.next("Clear the remaining sessions")
        for name in remaining {
            try await client.clear(session: name)
        }
        await printEvents(until: remaining) { $0 == .notFederated }

        var history: [String] = []
        for await state in watchedStates {
            history.append("\(state)")
            if history.count > 1, state == .notFederated { break }
        }
        steps.next("\(watched) as its own stream saw it: \(history.joined(separator: " -> "))")
    }
}
