import ArgumentParser
import Federation

/// `federate status`: the session as JSON, without secrets; never calls the network.
struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the session's state as JSON: session, state, identityId, provider, expiration (no secrets).",
        discussion: "state is one of notFederated, federated, expired, terminated. Exits 0 whatever the state."
    )

    @OptionGroup var common: CommonOptions

    func run() async throws(CLIFailure) {
        let access = try KeystoreAccess(common)
        let snapshot = try await access.savedSession(common.session, expiryMargin: common.margin)
        try Terminal.out(Rendering.status(snapshot))
        // A mistyped --keystore or --access-group reads as notFederated too: say which it was.
        // (The read made the same checks; should this one fail, the answer above still stands.)
        if snapshot.state == .notFederated, let absent = (try? access.absenceNote()) ?? nil {
            Terminal.note(absent)
        }
    }
}
