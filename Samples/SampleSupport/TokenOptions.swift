public import ArgumentParser
import Foundation

/// Where a sample gets the end user's ID token: `--token-file PATH` or `--demo-token`,
/// exactly one of them.
///
/// The token is a bearer secret: it is returned, never printed; what is printed says
/// only where it came from and how long it is.
public struct TokenOptions: ParsableArguments, Sendable {
    @Option(help: "A file holding the user's ID token (a JWT); a trailing newline is ignored.")
    public var tokenFile: String?

    @Flag(help: "Generate an unsigned demo JWT instead of reading one (only useful against moto).")
    public var demoToken = false

    public init() {}

    public func validate() throws {
        guard (tokenFile != nil) != demoToken else {
            throw ValidationError("give exactly one of --token-file PATH or --demo-token")
        }
    }

    /// The ID token: read from `--token-file`, or with `--demo-token` an unsigned
    /// ``DemoJWT`` for `demoSubject` from `demoIssuer`. Prints one detail line on where
    /// it came from (never the token).
    public func idToken(demoSubject: String, demoIssuer: String, steps: StepPrinter) throws -> String {
        if let tokenFile {
            let token = try String(contentsOfFile: tokenFile, encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            steps.detail("read a \(token.utf8.count)-byte token from \(tokenFile) (not shown)")
            return token
        }
        steps.detail("generated an unsigned demo JWT: iss=\(demoIssuer), sub=\(demoSubject), valid 1 h (not shown)")
        return DemoJWT.make(subject: demoSubject, issuer: demoIssuer)
    }
}
