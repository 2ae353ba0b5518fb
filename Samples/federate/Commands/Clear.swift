import ArgumentParser
import Federation
import SecureStorage

/// `federate clear`: forgets the session, durably.
struct Clear: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Forget the session: its identity ID and credentials are removed from the keystore.",
        discussion: "Also works on a session whose saved item is damaged or sealed with another key."
    )

    @OptionGroup var common: CommonOptions

    func run() async throws(CLIFailure) {
        let access = try KeystoreAccess(common)
        guard access.rootExists else { return }
        let keystore = try access.open()
        let session = common.session
        let configuration = KeystoreAccess.offlineConfiguration(expiryMargin: common.margin)
        do {
            let client: FederationClient
            do {
                client = try FederationClient(configuration: configuration, keystore: keystore, logger: access.logger)
            } catch where error.code == .storage {
                // One unreadable saved session keeps the client from restoring any, so it
                // could not clear this one: remove its item directly, then try again.
                try FederationClient.removeSavedSession(session, from: keystore)
                client = try FederationClient(configuration: configuration, keystore: keystore, logger: access.logger)
            }
            try await client.clear(session: session)
        } catch {
            throw CLIFailure.federation(error, root: access.root)
        }
    }
}
