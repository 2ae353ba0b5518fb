// sample-migration: keep a session in an encrypted FileKeystore, then move the tool to a
// shared access group, the way Amplify's `AccessGroup(name:migrateKeychainItemsOfUserSession:)`
// moves keychain items.
//
//   1. Group `none` (private to the tool): federate a guest session; it is saved.
//   2. Reopen with AccessGroup(name: "team", migrateItemsOfUserSession: true): the session is
//      moved and restored from the new group.
//   3. Reopen with another group and migration off: it starts empty (nothing is moved).
//   4. Reopen "team": the session is still there: switching without migration wipes nothing.
//
//   sample-migration --endpoint http://127.0.0.1:5000/ --pool-id us-east-1:… [--keystore DIR]
//
// Prints each step; never a secret key, session token or keystore key.

import ArgumentParser
import Federation
import Foundation
import Logging
import SecureStorage

@main
struct AccessGroupMigration: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sample-migration",
        abstract: "Save a session under access group none, migrate it to a shared group, and switch groups without migration."
    )

    @Option(help: "The Cognito Identity endpoint, e.g. http://127.0.0.1:5000/ for moto. Omit for AWS.")
    var endpoint: String?

    @Option(help: "The identity pool ID, REGION:GUID (must allow guest identities).")
    var poolId: String

    @Option(help: "The keystore root; must not exist yet or be private to you. Default: a fresh temporary directory, removed afterwards.")
    var keystore: String?

    @Option(help: "The tool's service name in the keystore.")
    var service = "sample-migration"

    @Option(help: "The shared access group to migrate to.")
    var group = "team"

    @Option(help: "The session name.")
    var session = "alice"

    @Option(help: "Credentials count as expired this many seconds early (moto issues 90 s credentials).")
    var expiryMargin: Double = 30

    @Flag(help: "Show the library's and keystore's debug log (never secret) on stderr.")
    var verbose = false

    func run() async throws {
        var logger = Logger(label: "sample-migration", factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = verbose ? .debug : .warning
        let configuration = FederationConfiguration(
            identityPoolId: poolId,
            endpoint: endpoint,
            expiryMargin: .milliseconds(Int64(expiryMargin * 1000))
        )

        var temporary: String?
        let root: String
        if let keystore {
            root = keystore
        } else {
            let parent = FileManager.default.temporaryDirectory.appendingPathComponent("sample-migration-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            temporary = parent
            root = parent + "/keystore"  // created by FileKeystore with the modes it requires
        }
        defer { if let temporary { try? FileManager.default.removeItem(atPath: temporary) } }
        print("Keystore root: \(root) (key files created there on first use)")

        /// Opens the keystore in `accessGroup` and a client that restores its saved sessions.
        func open(_ accessGroup: AccessGroup) throws -> (FileKeystore, FederationClient) {
            let store = try FileKeystore(root: root, service: service, accessGroup: accessGroup, logger: logger)
            return (store, try FederationClient(configuration: configuration, keystore: store, logger: logger))
        }

        print("1. Access group none: federate a guest session '\(session)' and save it")
        let original: FederationResult
        do {
            let (store, client) = try open(.none)
            original = try await client.federateAsGuest(session: session)
            print("   identity ID:   \(original.identityId)")
            print("   access key ID: \(original.credentials.accessKeyId), expires \(original.credentials.expiration)")
            print("   items in group none: \(try store.keys())")
        }

        print("2. Reopen with AccessGroup(name: \"\(group)\", migrateItemsOfUserSession: true)")
        do {
            let (store, client) = try open(AccessGroup(name: group, migrateItemsOfUserSession: true))
            let restored = await client.session(session)
            print("   items in group \(group): \(try store.keys())")
            print("   restored session: state \(restored.state), identity ID \(restored.identityId ?? "none"), access key ID \(restored.credentials?.accessKeyId ?? "none")")
            guard restored.identityId == original.identityId, restored.credentials?.accessKeyId == original.credentials.accessKeyId else {
                print("   the session did not move to the new group")
                throw ExitCode.failure
            }
            print("   the session moved: copied, verified, then deleted from group none")
        }

        let other = group + "-without-migration"
        print("3. Reopen with AccessGroup(name: \"\(other)\") (migration off)")
        do {
            let (store, client) = try open(AccessGroup(name: other))
            let snapshot = await client.session(session)
            print("   items in group \(other): \(try store.keys())")
            print("   session '\(session)': state \(snapshot.state)")
            guard snapshot.state == .notFederated else { throw ExitCode.failure }
            print("   a new group without migration starts empty; the previous group's items are left alone")
        }

        print("4. Reopen AccessGroup(name: \"\(group)\") (migration off)")
        do {
            let (store, client) = try open(AccessGroup(name: group))
            let snapshot = await client.session(session)
            print("   items in group \(group): \(try store.keys())")
            print("   session '\(session)': state \(snapshot.state), identity ID \(snapshot.identityId ?? "none")")
            guard snapshot.identityId == original.identityId else { throw ExitCode.failure }
            print("   still there: switching groups never wipes a session by surprise")
        }
    }
}
