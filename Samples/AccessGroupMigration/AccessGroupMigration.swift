// sample-migration: keep a session in an encrypted SQLiteKeystore, then move the tool to a
// shared access group, the way Amplify's `AccessGroup(name:migrateKeychainItemsOfUserSession:)`
// moves keychain items.
//
//   1. Group `none` (private to the tool): federate a guest session; it is saved.
//   2. Reopen with AccessGroup(name: "team") and moveItemsFromPreviousGroup: the session is
//      moved and restored from the new group.
//   3. Reopen with another group and migration off: it starts empty (nothing is moved).
//   4. Reopen "team": the session is still there: switching without migration wipes nothing.
//
//   sample-migration --endpoint http://127.0.0.1:5000/ --pool-id us-east-1:… [--keystore DIR]
//
// The pool must allow unauthenticated identities.
// Prints each step; never a secret key, session token or keystore key.

import ArgumentParser
import Federation
import Foundation
import SampleSupport
import SecureStorage

@main
struct AccessGroupMigration: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample-migration",
        abstract: "Save a session under access group none, migrate it to a shared group, and switch groups without migration."
    )

    @OptionGroup var options: SampleOptions
    @OptionGroup var margin: ExpiryMarginOptions

    @Option(help: "The keystore root; must not exist yet or be private to you. Default: a fresh temporary directory, removed afterwards.")
    var keystore: String?

    @Option(help: "The tool's service name in the keystore.")
    var service = "sample-migration"

    @Option(help: "The shared access group to migrate to.")
    var group = "team"

    @Option(help: "The session name.")
    var session = "alice"

    func run() async throws {
        let logger = options.logger(label: "sample-migration")
        let configuration = options.configuration(expiryMargin: margin.expiryMargin)
        var steps = StepPrinter()

        var temporary: String?
        let root: String
        if let keystore {
            root = keystore
        } else {
            let parent = FileManager.default.temporaryDirectory.appendingPathComponent("sample-migration-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            temporary = parent
            root = parent + "/keystore"  // created by SQLiteKeystore with the modes it requires
        }
        defer { if let temporary { try? FileManager.default.removeItem(atPath: temporary) } }
        print("Keystore root: \(root) (key files created there on first use)")

        /// Opens the keystore in `accessGroup` (moving the service's items from the group it
        /// used last when `moveItems` is on) and a client over it.
        func open(_ accessGroup: AccessGroup, moveItems: Bool = false) throws -> (SQLiteKeystore, FederationClient) {
            let store = try SQLiteKeystore(
                root: root, service: service, accessGroup: accessGroup,
                configuration: SQLiteKeystore.Configuration(moveItemsFromPreviousGroup: moveItems), logger: logger)
            return (store, try FederationClient(configuration: configuration, keystore: store, logger: logger))
        }

        steps.next("Access group none: federate a guest session '\(session)' and save it")
        let original: FederationResult
        do {
            let (store, client) = try open(.none)
            original = try await client.federateAsGuest(session: session)
            steps.detail(original)
            steps.detail("items in group none: \(try await store.keys())")
            await close(store, client)
        }

        steps.next("Reopen with AccessGroup(name: \"\(group)\") and moveItemsFromPreviousGroup")
        do {
            let (store, client) = try open(AccessGroup(name: group), moveItems: true)
            let restored = try await client.session(session)
            steps.detail("items in group \(group): \(try await store.keys())")
            steps.detail("restored session: state \(restored.state), identity ID \(restored.identityId ?? "none"), access key ID \(restored.credentials?.accessKeyId ?? "none")")
            guard restored.identityId == original.identityId, restored.credentials?.accessKeyId == original.credentials.accessKeyId else {
                steps.detail("the session did not move to the new group")
                throw ExitCode.failure
            }
            steps.detail("the session moved: copied and verified in one transaction, then deleted from group none in another")
            await close(store, client)
        }

        let other = group + "-without-migration"
        steps.next("Reopen with AccessGroup(name: \"\(other)\") (migration off)")
        do {
            let (store, client) = try open(AccessGroup(name: other))
            let snapshot = try await client.session(session)
            steps.detail("items in group \(other): \(try await store.keys())")
            steps.detail("session '\(session)': state \(snapshot.state)")
            guard snapshot.state == .notFederated else {
                steps.detail("expected no session in a group without migration")
                throw ExitCode.failure
            }
            steps.detail("a new group without migration starts empty; the previous group's items are left alone")
            await close(store, client)
        }

        steps.next("Reopen AccessGroup(name: \"\(group)\") (migration off)")
        do {
            let (store, client) = try open(AccessGroup(name: group))
            let snapshot = try await client.session(session)
            steps.detail("items in group \(group): \(try await store.keys())")
            steps.detail("session '\(session)': state \(snapshot.state), identity ID \(snapshot.identityId ?? "none")")
            guard snapshot.identityId == original.identityId else {
                steps.detail("expected the session's identity ID \(original.identityId) in its own group")
                throw ExitCode.failure
            }
            steps.detail("still there: switching groups never wipes a session by surprise")
            await close(store, client)
        }
    }

    /// The client first (it may still commit), then the store it does not own.
    private func close(_ store: SQLiteKeystore, _ client: FederationClient) async {
        await client.shutdown()
        store.close()
    }
}
