import Federation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads the provider token from a file or stdin. Trailing line breaks are dropped
/// (`echo "$TOKEN" > file` adds one). Errors name the file (when it cannot be a pasted token:
/// ``describeFile(_:)``), never the content.
enum TokenReader {
    static func contents(ofFile path: String) throws(CLIFailure) -> String {
        let source = describeFile(path)
        var bytes: [UInt8]
        do throws(BoundedInput.Failure) {
            bytes = try BoundedInput.readFile(path, limit: ProviderTokenText.maxBytes)
        } catch {
            throw CLIFailure(.usage, "\(BoundedInput.describe(error, source: source)); check --token-file")
        }
        return try decode(&bytes, source: source)
    }

    /// The token file for an error message: named when it starts like a path, holds a `/`
    /// among characters base64 does not use, or is short; else only measured, since it may be
    /// a token pasted in place of a path (one ``Federate/looksLikeAToken(_:)`` does not
    /// recognise, such as a short custom token, or standard base64 with its `/` and `+`).
    static func describeFile(_ path: String) -> String {
        let utf8 = path.utf8
        let base64 = utf8.allSatisfy(ArgumentShape.isStandardBase64)
        if ArgumentShape.startsLikeAPath(path) || (utf8.contains(UInt8(ascii: "/")) && !base64) || utf8.count <= 16 {
            return "token file '\(path)'"
        }
        return "the token file (a name of \(path.utf8.count) bytes, not shown: it may be the token itself; name a file here as ./NAME)"
    }

    static func readStandardInput() throws(CLIFailure) -> String {
        // A terminal would wait, without a prompt, for input that only ends at Ctrl-D, and
        // show the token on screen as it is typed or pasted.
        if isatty(STDIN_FILENO) == 1 {
            throw CLIFailure(
                .usage,
                "--token-stdin reads the token from a pipe or a file, and standard input is a terminal (a token typed or pasted there shows on screen); "
                    + "pipe it in, redirect it ('< FILE'), or use --token-file")
        }
        let wait = try standardInputWait()
        var bytes: [UInt8]
        do throws(BoundedInput.Failure) {
            bytes = try BoundedInput.readStandardInput(limit: ProviderTokenText.maxBytes, wait: wait)
        } catch {
            let advice = if case .timedOut = error {
                "end the token's input (a command that exits, a redirected file), or give a slower writer more time with \(waitVariable)=SECONDS (0: no limit)"
            } else {
                "pipe the token in, or use --token-file"
            }
            throw CLIFailure(.usage, "\(BoundedInput.describe(error, source: "standard input")); \(advice)")
        }
        return try decode(&bytes, source: "standard input")
    }

    /// Seconds `--token-stdin` waits for its input to end; 0 for no limit.
    static let waitVariable = "IDENTITY_BROKER_STDIN_TIMEOUT"

    /// How long `--token-stdin` waits: ``waitVariable``'s seconds (`nil`, no limit, for 0), else
    /// ``BoundedInput/standardInputWait``.
    private static func standardInputWait() throws(CLIFailure) -> Duration? {
        guard let text = KeystoreAccess.environment(waitVariable) else { return BoundedInput.standardInputWait }
        guard let seconds = Int(text), (0...86_400).contains(seconds) else {
            throw CLIFailure(.usage, "\(waitVariable) must be a whole number of seconds from 0 (no limit) to 86400; set it so, or unset it for the default of \(BoundedInput.standardInputWait.components.seconds)")
        }
        return seconds == 0 ? nil : .seconds(seconds)
    }

    private static func decode(_ bytes: inout [UInt8], source: String) throws(CLIFailure) -> String {
        switch ProviderTokenText.decode(&bytes) {
        case .success(let token):
            return token
        case .failure(.tooLarge):
            throw CLIFailure(
                .usage, "the token from \(source) is larger than the \(FederationClient.maximumTokenBytes) bytes Cognito takes; pass the provider's token only")
        case .failure(.empty):
            throw CLIFailure(.usage, "the token from \(source) is empty; pass the provider's token")
        case .failure(.notUTF8):
            throw CLIFailure(.usage, "the token from \(source) is not UTF-8 text; pass the provider's token")
        }
    }
}
