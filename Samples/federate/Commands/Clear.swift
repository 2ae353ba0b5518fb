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
        let client: FederationClient
        do {
            client = try FederationClient(configuration: Self.offline(common), keystore: keystore, logger: access.logger)
        } catch where error.code == .storage {
            // One unreadable saved session keeps the client from restoring any, so it
            // could not clear this one: remove its item directly, then try again.
            do {
                try FederationClient.removeSavedSession(session, from: keystore)
            } catch {
                throw CLIFailure.federation(error, root: access.root)
            }
            do {
                client = try FederationClient(configuration: Self.offline(common), keystore: keystore, logger: access.logger)
            } catch {
                throw CLIFailure.federation(error, root: access.root)
            }
        } catch {
            throw CLIFailure.federation(error, root: access.root)
        }
        do {
            try await client.clear(session: session)
        } catch {
            throw CLIFailure.federation(error, root: access.root)
        }
    }

    private static func offline(_ common: CommonOptions) -> FederationConfiguration {
        KeystoreAccess.offlineConfiguration(expiryMargin: common.margin)
    }
}
