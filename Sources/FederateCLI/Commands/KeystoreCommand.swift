/// The subcommands that open a keystore, with the options that name it.
protocol KeystoreCommand {
    var store: KeystoreOptions { get }
}

/// The subcommands that take a session's options too.
protocol SessionCommand: KeystoreCommand {
    var common: CommonOptions { get }
}

extension SessionCommand {
    var store: KeystoreOptions { common.store }
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
