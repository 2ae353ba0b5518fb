import ArgumentParser
import Federation

/// `federate clear`: forgets the session, durably.
struct Clear: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Forget the session: its identity ID and credentials are removed from the keystore.",
        discussion: "Also works on a session whose saved item is damaged or sealed with another key."
    )

    @OptionGroup var common: CommonOptions

    func run() async throws(CLIFailure) {
        let access = try KeystoreAccess(common)
        guard try access.namespaceExists() else { return }
        let client = try await access.offlineClient(expiryMargin: common.margin)
        do {
            // Removing never opens the item, so a damaged one goes too.
            try await client.clear(session: common.session)
        } catch {
            throw CLIFailure.federation(error, root: access.root)
        }
    }
}
