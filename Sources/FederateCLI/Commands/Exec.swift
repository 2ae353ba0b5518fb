package import ArgumentParser

/// `federate exec -- CMD [ARGS...]`: runs a command that gets the session's credentials
/// from a loopback credential server (the AWS container credential provider), read from
/// the keystore at each request; never calls the network.
package struct Exec: AsyncParsableCommand {
    package static let configuration = CommandConfiguration(
        abstract: "Run a command that gets the session's credentials from a loopback credential server.",
        discussion: """
            The command gets AWS_CONTAINER_CREDENTIALS_FULL_URI and AWS_CONTAINER_AUTHORIZATION_TOKEN; \
            variables the AWS SDKs would read first (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, \
            AWS_SESSION_TOKEN, AWS_PROFILE, AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE, …) and the \
            keystore's key are removed from its environment. Each request reads the session as the \
            keystore holds it then, so 'federate login' in another shell is served at once. SIGINT, \
            SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGALRM are forwarded to the command. Exits \
            with the command's status (128 + the signal that killed it); 3 without running it when the \
            session has no valid credentials (4 for a terminated identity); 2 without running it when the \
            default profile of ~/.aws/credentials or ~/.aws/config (or boto's ~/.boto) gives credentials, \
            which the SDKs would use first (the line says which file, and the variable that points it \
            away), or /etc/boto.cfg, or a JVM option in JAVA_TOOL_OPTIONS and the like does; 127 when it \
            cannot be found, 126 when it cannot be executed. AWS_EC2_METADATA_DISABLED is set to true \
            unless given a non-empty value, so that no SDK falls back to the instance's role.
            """
    )

    @OptionGroup package var common: CommonOptions

    @Argument(parsing: .postTerminator, help: ArgumentHelp("The command and its arguments, after --.", valueName: "CMD"))
    package var command: [String] = []

    package init() {}

    package func validate() throws {
        guard !command.isEmpty else {
            throw ValidationError("no command given; write it after --, e.g. 'federate exec --session alice -- aws s3 ls'")
        }
    }

    /// Runs in `federate-server` (``ServerSide``): the credential server links NIO.
    package func run() async throws(CLIFailure) {
        try await ActiveServerSide.current.exec(self)
    }
}
