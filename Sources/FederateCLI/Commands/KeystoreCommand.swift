/// The subcommands that open a keystore, with the options that name it.
protocol KeystoreCommand {
    var common: CommonOptions { get }
}

extension Login: KeystoreCommand {}
extension Guest: KeystoreCommand {}
extension Credentials: KeystoreCommand {}
extension Status: KeystoreCommand {}
extension Clear: KeystoreCommand {}
extension Migrate: KeystoreCommand {}
extension Rekey: KeystoreCommand {}
extension Exec: KeystoreCommand {}
extension Serve: KeystoreCommand {}
