package import ArgumentParser

/// `federate serve`: prints the container-credential variables as `export` lines, then
/// serves the session on 127.0.0.1 until SIGINT or SIGTERM; never calls the network.
package struct Serve: AsyncParsableCommand {
    package static let configuration = CommandConfiguration(
        abstract: "Serve the session's credentials on 127.0.0.1 until SIGINT/SIGTERM; print the variables to hand a process.",
        discussion: """
            Prints export AWS_CONTAINER_CREDENTIALS_FULL_URI=… and export AWS_CONTAINER_AUTHORIZATION_TOKEN=… \
            (single-quoted) on stdout, then serves; each request reads the session as the keystore holds it then. \
            Exits 0 on SIGINT or SIGTERM. A session without valid credentials is served anyway (requests get 404 \
            until you log in), with a note on stderr.
            """
    )

    @OptionGroup package var common: CommonOptions

    package init() {}

    /// Runs in `federate-server` (``ServerSide``): the credential server links NIO.
    package func run() async throws(CLIFailure) {
        try await ActiveServerSide.current.serve(self)
    }
}
