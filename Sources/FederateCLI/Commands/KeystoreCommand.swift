/// The subcommands that open a keystore, with the options that name it.
protocol KeystoreCommand {
    var location: KeystoreLocationOptions { get }
}

/// The subcommands that take a session's options too.
protocol SessionCommand: KeystoreCommand {
    var common: CommonOptions { get }
}

extension SessionCommand {
    var location: KeystoreLocationOptions { common.store.location }
}

extension Rekey {
    var location: KeystoreLocationOptions { store.location }
}

extension Login: SessionCommand {}
extension Guest: SessionCommand {}
extension Credentials: SessionCommand {}
extension Status: SessionCommand {}
extension Clear: SessionCommand {}
extension Migrate: KeystoreCommand {}
extension Rekey: KeystoreCommand {}
extension Exec: SessionCommand {}
extension Serve: SessionCommand {}
