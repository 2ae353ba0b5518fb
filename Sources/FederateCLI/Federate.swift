package import ArgumentParser
import Federation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `federate`: swaps identity-provider tokens for temporary AWS credentials and
/// keeps them, per named session, in an encrypted keystore.
///
/// The command line, output formats and exit codes are a contract (docs/cli.md).
/// Every failure ends here, in ``main()``,
/// as one line on stderr and an exit code from ``ExitStatus``. Two executables run it:
/// `federate` and `federate-server` (see ``ServerSide``).
package struct Federate: AsyncParsableCommand {
    package static let configuration = CommandConfiguration(
        commandName: "federate",
        abstract: "Swap identity-provider tokens for temporary AWS credentials.",
        discussion: """
            Exit codes: 0 ok; 1 internal error; 2 usage or bad local input; \
            3 no valid credentials (log in again); 4 rejected by the identity service; \
            5 identity service unavailable after retries; 6 keystore error. \
            exec exits with its command's status, 126 when it cannot be executed, 127 when it cannot be found. \
            federate --version prints the version.
            """,
        subcommands: [Login.self, Guest.self, Credentials.self, Status.self, Clear.self, Migrate.self, Rekey.self, Exec.self, Serve.self]
    )

    package init() {}

    package func run() async throws {
        throw CLIFailure(.usage, "no subcommand given; run 'federate --help' for the list")
    }

    /// Runs `federate credentials` to the end when its command line needs no argument-parser
    /// (``CredentialsCommandLine``) and one read of the keystore answers it; returns, having
    /// written nothing, for anything else, which ``main(serverSide:)`` then runs.
    ///
    /// For a synchronous `main`: the cache hit then starts no task, and so no thread of the
    /// cooperative pool (3 thread creations and hand-offs, measurable in a process this short).
    /// It reports and exits as ``main()`` would for the same command.
    package static func runCacheHitAtOnce(serverSide: any ServerSide) {
        guard let credentials = CredentialsCommandLine.parse(Array(CommandLine.arguments.dropFirst())) else { return }
        ActiveServerSide.install(serverSide)
        let status: ExitStatus
        do throws(CLIFailure) {
            try ActiveServerSide.current.prepare(keystore: credentials.keystore)
            guard try credentials.runAtOnce() else { return }
            status = .ok
        } catch {
            Terminal.fail(error.message)
            status = error.status
        }
        Terminal.exit(status)
    }

    /// Parses, runs, and turns every error into one stderr line and a contract exit code.
    ///
    /// argument-parser's own `main` exits 64 (EX_USAGE) on a usage error; the
    /// contract says 2, so parsing errors are caught here.
    static func main() async {
        let status: ExitStatus
        neverShowSecretsGivenToThisRun()
        do {
            // The cache hit an SDK runs before every AWS call skips argument-parser's reflection
            // when the command line is one it would read the same way (CredentialsCommandLine).
            if let credentials = CredentialsCommandLine.parse(Array(CommandLine.arguments.dropFirst())) {
                try ActiveServerSide.current.prepare(keystore: credentials.keystore)
                try await credentials.run()
            } else if CommandLine.arguments.dropFirst().elementsEqual(["--version"]) {
                // Not argument-parser's `version:`, which would offer `--version` to every
                // subcommand's mistyped option ("did you mean '--version'?" for `--session`).
                try Terminal.out(IdentityBrokerVersion.current + "\n")
            } else {
                // argument-parser's `help NAME` prints the top-level help and exits 0 for a
                // NAME it does not know.
                if CommandLine.arguments.dropFirst().first == "help", let unknown = unknownSubcommand(in: CommandLine.arguments) {
                    throw CLIFailure(.usage, "\(unknown)\(usageHint(for: unknown))")
                }
                var command = try await asyncParseAsRoot(nil)
                try ActiveServerSide.current.prepare(command)
                if var asyncCommand = command as? any AsyncParsableCommand {
                    try await asyncCommand.run()
                } else {
                    try command.run()
                }
            }
            status = .ok
        } catch let failure as CLIFailure {
            Terminal.fail(failure.message)
            status = failure.status
        } catch {
            status = reportParserError(error)
        }
        // A PostgreSQL keystore's connection pool ends before the process does.
        await ActiveServerSide.current.closeKeystores()
        Terminal.exit(status)
    }

    /// Registers, before anything is parsed, the secrets this run was given, so that no
    /// message can show them: a usage error quotes the argument it could not read, which may
    /// be a `postgres://` URL with its password given without `--keystore`. Those are the key
    /// variables and the password of any URL in the arguments or `$IDENTITY_BROKER_KEYSTORE`
    /// (its raw text; the URL parser's own errors never quote it). Arguments shaped like a
    /// token are registered too: a token pasted where a path or option belongs
    /// (`--token-file "$TOKEN"`, a stray positional argument) would otherwise be quoted whole
    /// by the error about it, into a terminal or a CI log.
    private static func neverShowSecretsGivenToThisRun() {
        for name in KeySelection.secretVariables {
            if let value = KeystoreAccess.environment(name) { Terminal.neverShow(value) }
        }
        let arguments = CommandLine.arguments.dropFirst()
        // Not past `exec`'s `--`: its command and arguments (a jq filter with `|`, say) are the
        // command's, which federate never quotes. Another command takes nothing after `--`,
        // and argument-parser's error quotes what it finds there.
        let scanned = arguments.first == "exec" ? arguments.prefix(while: { $0 != "--" }) : arguments
        // Group names may be up to 150 bytes of anything but `/`: never taken for tokens.
        let groupOptions: Set<String> = ["--access-group", "--from", "--to"]
        var previous: String?
        for argument in scanned {
            defer { previous = argument }
            // `--option=value` carries its value after the first `=`.
            let parts = argument.hasPrefix("--") ? argument.split(separator: "=", maxSplits: 1).map(String.init) : []
            let (option, value) = parts.count == 2 ? (parts[0], parts[1]) : (nil, argument)
            let followsGroupOption = previous.map(groupOptions.contains) == true && !argument.hasPrefix("-")
            if followsGroupOption || option.map(groupOptions.contains) == true { continue }
            if looksLikeAToken(value) { Terminal.neverShow(value) }
        }
        let candidates = CommandLine.arguments.dropFirst() + [KeystoreAccess.environment(KeystoreAccess.keystoreVariable)].compactMap { $0 }
        for text in candidates {
            let bytes = Array(text.utf8)
            if let password = URLPassword.range(in: bytes) { Terminal.neverShow(String(decoding: bytes[password], as: UTF8.self)) }
        }
    }

    /// A JWT or JWE (three or five base64url parts, the first a JSON header, `eyJ…`: every
    /// OIDC and developer token); more than 255 bytes of base64 that do not start like a
    /// path (a SAML assertion); more than 128 bytes (the longest session name) with no `/`
    /// and no space (Facebook's `EAA…`, Google's `ya29.…` and Amazon's `Atza|…` access
    /// tokens); or 32 bytes or more holding `|` or `;` (Amazon's, Twitter's `token;secret`),
    /// which no name the CLI takes has. Session names, host names, ARNs and identity IDs do
    /// not look so.
    static func looksLikeAToken(_ text: String) -> Bool {
        let utf8 = Array(text.utf8)
        let parts = utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        if utf8.count >= 32, [3, 5].contains(parts.count), parts[0].starts(with: "eyJ".utf8),
           parts.allSatisfy({ $0.allSatisfy(ArgumentShape.isBase64URL) })
        {
            return true
        }
        if utf8.count > 255 && !ArgumentShape.startsLikeAPath(text)
            && utf8.allSatisfy({ ArgumentShape.isBase64URL($0) || ArgumentShape.isStandardBase64($0) })
        {
            return true
        }
        let printable = utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
        if utf8.count > SessionName.maxLength && printable && !utf8.contains(UInt8(ascii: "/")) { return true }
        return utf8.count >= 32 && printable && utf8.contains { $0 == UInt8(ascii: "|") || $0 == UInt8(ascii: ";") }
    }

    /// Help and version requests print to stdout and exit 0; anything else
    /// argument-parser raises is a usage error, exit 2, in one line.
    private static func reportParserError(_ error: any Error) -> ExitStatus {
        let code = exitCode(for: error)
        if code == .success {
            let text = fullMessage(for: error)
            guard !text.isEmpty else { return .ok }
            do throws(CLIFailure) {
                try Terminal.out(text + "\n")
            } catch {
                // Help that did not reach stdout (closed, disk full) is not a success either.
                Terminal.fail(error.message)
                return error.status
            }
            return .ok
        }
        // Measured before the first line is taken: an argument with a line break in it would
        // no longer be found whole.
        let message = withoutLongStrayArguments(message(for: error))
            .split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: " ") }
            .first { !$0.isEmpty }
            .map { $0.hasPrefix("Error: ") ? String($0.dropFirst(7)) : $0 } ?? "invalid command line"
        if code == .validationFailure {
            let message = usageMessage(message, arguments: CommandLine.arguments)
            Terminal.fail("\(message)\(usageHint(for: message))")
            return .usage
        }
        Terminal.fail("internal error: \(message); please report it")
        return .internalError
    }
}

extension Federate {
    /// The arguments a stray-argument error would quote, measured instead when they are 16
    /// bytes or more: no subcommand but `exec` takes a positional argument, and a secret
    /// pasted there (a custom provider's opaque token, which nothing marks as one) would
    /// otherwise reach the terminal or a CI log whole. A short typo is still shown, and so is
    /// an argument holding a registered secret, which stderr shows with it redacted (a
    /// database URL given without `--keystore`: the rest of it tells what went wrong).
    static func withoutLongStrayArguments(_ message: String, arguments: [String] = Array(CommandLine.arguments.dropFirst())) -> String {
        guard message.contains("Unexpected argument") || message.contains("unexpected arguments:") else { return message }
        var result = message
        let measured = Set(arguments).filter { $0.utf8.count >= 16 && !Terminal.holdsSecret($0) }
        // Longest first: a shorter argument may be part of a longer one.
        for argument in measured.sorted(by: { $0.utf8.count > $1.utf8.count }) {
            result = result.replacing("'\(argument)'", with: "(an argument of \(argument.utf8.count) bytes, not shown)")
        }
        return result
    }
}

extension Substring {
    /// The text without leading and trailing `characters`.
    fileprivate func trimmingCharacters(in characters: String) -> String {
        let set = Set(characters)
        return String(drop { set.contains($0) }.reversed().drop { set.contains($0) }.reversed())
    }
}
