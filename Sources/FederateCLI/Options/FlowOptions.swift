import ArgumentParser
import Federation

/// `--flow enhanced|classic` and the classic flow's options, for `login` and `guest`
/// (docs/cli.md).
struct FlowOptions: ParsableArguments {
    /// The authflow named on the command line.
    enum Choice: String, ExpressibleByArgument, CaseIterable, Sendable {
        /// `GetId`, then `GetCredentialsForIdentity` (the default).
        case enhanced
        /// `GetId`, then `GetOpenIdToken`, then STS `AssumeRoleWithWebIdentity`.
        case classic
    }

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The authflow: enhanced (Cognito returns the credentials) or classic (STS AssumeRoleWithWebIdentity with the identity's Cognito OpenID token).",
            valueName: "enhanced|classic"))
    var flow: Choice = .enhanced

    @Option(
        name: .customLong("role-arn"),
        help: ArgumentHelp(
            "With --flow classic: the IAM role STS assumes (required). With enhanced (login only): the role to choose when the pool lets the token choose.",
            valueName: "ARN"))
    var roleArn: String?

    @Option(
        name: .customLong("role-session-name"),
        help: ArgumentHelp("--flow classic: the role session name STS records (2-64 of letters, digits, _+=,.@-); default: derived from --session.", valueName: "NAME"))
    var roleSessionName: String?

    @Option(name: .long, help: ArgumentHelp("--flow classic: how long the credentials last, 900 to 43200 seconds; default: STS's (3600).", valueName: "SECONDS"))
    var duration: Int?

    @Option(
        name: .customLong("policy-file"),
        help: ArgumentHelp("--flow classic: a file holding an IAM session policy (JSON) that narrows the role for this session.", valueName: "PATH"))
    var policyFile: String?

    @Option(
        name: .customLong("sts-endpoint"),
        help: ArgumentHelp("--flow classic: the STS endpoint; default: $AWS_ENDPOINT_URL_STS, else $AWS_ENDPOINT_URL, else AWS's regional one.", valueName: "URL"))
    var stsEndpoint: String?

    func validate() throws {
        if let roleArn, roleArn.isEmpty { throw ValidationError("--role-arn must not be empty") }
        if stsEndpoint == "" {
            throw ValidationError("--sts-endpoint is empty (an unset variable?): leave it out to use $AWS_ENDPOINT_URL_STS, else $AWS_ENDPOINT_URL, else AWS's own")
        }
        // Either flow: the enhanced flow's role goes to Cognito, the classic flow's to STS.
        if let roleArn, !ClassicFlowOptions.isRoleArn(roleArn) {
            throw ValidationError("--role-arn must be an IAM role ARN like arn:aws:iam::123456789012:role/NAME")
        }
        switch flow {
        case .classic:
            guard roleArn != nil else {
                throw ValidationError("--flow classic needs --role-arn ARN: the IAM role STS assumes")
            }
        case .enhanced:
            let classicOnly = [
                ("--role-session-name", roleSessionName != nil), ("--duration", duration != nil),
                ("--policy-file", policyFile != nil), ("--sts-endpoint", stsEndpoint != nil),
            ].filter(\.1).map(\.0)
            if let first = classicOnly.first {
                throw ValidationError("\(first) applies to --flow classic only")
            }
        }
    }

    /// The flow for the library, the policy file read. Limits (duration, names) are the
    /// library's to check, so the CLI and the library keep one rule.
    func federationFlow() throws(CLIFailure) -> FederationFlow {
        guard flow == .classic, let roleArn else { return .enhanced }
        let policy = try policyFile.map { (path) throws(CLIFailure) -> String in try PolicyFileReader.contents(ofFile: path) }
        let options = ClassicFlowOptions(roleArn: roleArn, roleSessionName: roleSessionName, durationSeconds: duration, sessionPolicy: policy)
        // The library checks them again; here it is before the keystore is opened, so a
        // usage error creates nothing.
        do {
            try options.validate()
        } catch {
            throw CLIFailure.invalidConfiguration(error)
        }
        return .classic(options)
    }
}
