import ArgumentParser
import Federation
import SecureStorage

/// `federate migrate --from GROUP|none --to GROUP|none`
struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Move every saved session from one keystore access group to another.",
        discussion: """
            'none' is the keystore private to you. Items are copied and verified in one transaction, then deleted \
            from the source in another; running it again completes an interrupted migration. When any item cannot \
            be opened (wrong key, tampered or corrupt), nothing moves and the command exits 6 saying how many.
            """
    )

    @Option(name: .long, help: ArgumentHelp("The access group the sessions are in now.", valueName: "GROUP|none"))
    var from: String

    @Option(name: .long, help: ArgumentHelp("The access group to move them to.", valueName: "GROUP|none"))
    var to: String

    @OptionGroup var location: KeystoreLocationOptions

    func validate() throws {
        guard !from.isEmpty, !to.isEmpty else { throw ValidationError("--from and --to take a group name or 'none'") }
        for (name, option) in [(from, "--from"), (to, "--to")] {
            if let problem = KeystoreOptions.groupNameProblem(name, option: option) { throw ValidationError(problem) }
        }
        // A typo on either side more likely than a no-op wanted: "moved 0 items" would look done.
        guard KeystoreAccess.group(from) != KeystoreAccess.group(to) else {
            throw ValidationError("--from and --to name the same access group; nothing would move")
        }
    }

    func run() async throws(CLIFailure) {
        let access = try KeystoreAccess(keystore: location.keystore, accessGroup: nil, logger: location.logger)
        let source = KeystoreAccess.group(from)
        let target = KeystoreAccess.group(to)
        let moved = try await access.migrate(from: source, to: target)
        let none = moved == 0 ? " (\(source) holds none here: check --from and --keystore)" : ""
        Terminal.note("moved \(moved) item\(moved == 1 ? "" : "s") from access group \(source) to \(target)\(none)")
    }
}
