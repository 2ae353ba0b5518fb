import ArgumentParser
import Federation
import SecureStorage

/// `federate rekey`
struct Rekey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Re-seal every saved session of an access group with the current key (key rotation).",
        discussion: """
            The current key ($IDENTITY_BROKER_KEY, $IDENTITY_BROKER_PASSPHRASE, or the key file) seals; the old \
            key, given in $IDENTITY_BROKER_OTHER_KEY, $IDENTITY_BROKER_OTHER_PASSPHRASE or \
            $IDENTITY_BROKER_OTHER_KEY_FILE (a path), opens. The access group's key check moves to the current key \
            first (from then on a process that opens the group with the old key as the current one is refused), then every session the old \
            key opens is re-sealed with the current one, a few hundred per transaction. Running it again completes \
            an interrupted rotation and re-seals what processes still sealing with the old key wrote meanwhile. \
            Sessions no key opens are left as they are: the command exits 6 naming them.
            """
    )

    @OptionGroup var store: KeystoreOptions

    func run() async throws(CLIFailure) {
        let access = try KeystoreAccess(store)
        let rotation = try await access.rekey()
        let group = access.accessGroup
        let sessions = { (count: Int) in "\(count) session\(count == 1 ? "" : "s")" }
        guard rotation.keyCheckMoved else {
            // A mistyped group holds nothing: not "every session opens with the current key".
            Terminal.note("access group \(group) at \(access.root) holds no sessions: nothing to rotate (check --access-group and --keystore)")
            return
        }
        guard rotation.isComplete else {
            let listed = rotation.unreadableKeys.compactMap { SessionStore.session(forKey: $0) }.joined(separator: ", ")
            throw CLIFailure(
                .keystore,
                "access group \(group) at \(access.root): the key check moved to the current key and \(sessions(rotation.resealed)) re-sealed with it, "
                    + "but \(rotation.unreadable) item\(rotation.unreadable == 1 ? "" : "s") "
                    + "open with none of the keys given and were left as they are\(listed.isEmpty ? "" : " (\(listed))"); give their key in "
                    + "\(KeySelection.otherKeyVariables) and run rekey again, or clear those sessions")
        }
        guard KeySelection.givesKeysThatOnlyOpen else {
            // Every session already opens with the current key: the usual cause is an old key
            // left out, not a rotation that was already done.
            Terminal.note(
                "access group \(group) at \(access.root): every session (\(rotation.alreadySealed)) is already sealed with the current key; "
                    + "no old key was given (\(KeySelection.otherKeyVariables)), so nothing was re-sealed")
            return
        }
        Terminal.note(
            "access group \(group) at \(access.root): re-sealed \(sessions(rotation.resealed)) with the current key "
                + "(\(rotation.alreadySealed) already were); the key check moved to it, so processes that start with the old key as the current one are refused")
    }
}
