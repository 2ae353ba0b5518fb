import Federation
import SecureStorage

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What `broker-fuzz` runs on every input: response decoding (JSON and STS's XML), error decoding, `Retry-After`
/// parsing, JWT parsing and the CLI's token reading, the code that reads what a hostile or broken
/// server (or caller) hands the library.
///
/// Each function returns normally for every input; it traps (`precondition`)
/// only when an invariant the rest of the library relies on is broken, so the
/// fuzzer reports that input as a crash.
///
/// It lives here, not in `Federation`, so the library ships no fuzzing code: it reaches the
/// decoders and parsers through their `package` access, which only targets of this package see.
enum FuzzEntryPoints {
    /// A stand-in secret put into the redaction list of every decoded error.
    static let sentinelSecret = "FUZZ-SECRET-4f1c"

    /// Runs every decoder on `bytes`.
    static func run(_ bytes: [UInt8]) {
        decodeResponse(bytes)
        decodeError(bytes)
        parseJWT(bytes)
        readToken(bytes)
        decodeSTS(bytes)
    }

    /// Decodes `bytes` as an STS success and as an STS error body (the classic flow's XML).
    ///
    /// Invariants: a failure is `invalidResponse` naming no part of the sentinel secret;
    /// a success has non-empty credentials; an error carries the status it was given.
    static func decodeSTS(_ bytes: [UInt8]) {
        let redactor = SecretRedactor(secrets: [sentinelSecret])
        do {
            let output = try STSResponseDecoder.assumedRole(from: bytes, redactor: redactor)
            precondition(!output.credentials.accessKeyId.isEmpty && !output.credentials.secretAccessKey.isEmpty, "empty STS credentials")
        } catch {
            precondition(error.code == .invalidResponse, "STS decoding failed with \(error.code)")
            precondition(!redactor.matches(error.message), "an STS decoding error quotes the secret")
        }
        let error = STSErrorDecoder.decode(response: HTTPResponse(status: 400, body: bytes), operation: "AssumeRoleWithWebIdentity", redacting: [sentinelSecret])
        precondition(error.httpStatus == 400, "status lost")
        precondition(!redactor.matches(error.description), "an STS error quotes the secret")
    }

    /// Reads `bytes` as the CLI reads a token file, then checks the token as
    /// ``FederationClient`` does before sending a JWT-shaped one.
    ///
    /// Invariants: a token is non-empty, within the cap, without trailing line
    /// breaks; a failure is one of the three typed problems.
    static func readToken(_ bytes: [UInt8]) {
        var copy = bytes
        switch ProviderTokenText.decode(&copy) {
        case .success(let token):
            precondition(!token.isEmpty && token.utf8.count <= ProviderTokenText.maxBytes, "token not bounded")
            precondition(!token.hasSuffix("\n") && !token.hasSuffix("\r"), "a trailing line break was kept")
            parse(token: token)
        case .failure:
            break
        }
        precondition(copy.allSatisfy { $0 == 0 }, "the token bytes were not wiped")
    }

    /// Decodes `bytes` as the body of a 200 answer to each operation.
    ///
    /// Invariants: success or ``FederationError/Code/invalidResponse``; what
    /// a success hands on is usable (no empty identity ID, key, secret, session
    /// token or OpenID token; a finite expiration); the error message is bounded.
    static func decodeResponse(_ bytes: [UInt8]) {
        if let output = check(GetIdOutput.self, bytes, operation: "GetId") {
            precondition(!output.IdentityId.isEmpty, "an empty IdentityId was accepted")
        }
        if let output = check(GetCredentialsForIdentityOutput.self, bytes, operation: "GetCredentialsForIdentity") {
            let credentials = output.Credentials
            precondition(output.IdentityId?.isEmpty != true, "an empty IdentityId was accepted")
            precondition(
                !credentials.AccessKeyId.isEmpty && !credentials.SecretKey.isEmpty && !credentials.SessionToken.isEmpty,
                "empty credentials were accepted")
            precondition(credentials.Expiration.date.timeIntervalSince1970.isFinite, "a non-finite expiration was accepted")
        }
        if let output = check(GetOpenIdTokenOutput.self, bytes, operation: "GetOpenIdToken") {
            precondition(output.IdentityId?.isEmpty != true && !output.Token.isEmpty, "an empty identity or token was accepted")
        }
        check(WireErrorBody.self, bytes, operation: "error body")
        // The direct readers answer only as JSONDecoder answers.
        if let direct = GetIdOutput.readDirectly(bytes) {
            let reference = try? JSONDecoder().decode(GetIdOutput.self, from: Data(bytes))
            precondition(reference?.IdentityId == direct.IdentityId, "GetId read directly differs from JSONDecoder")
        }
        if let direct = GetCredentialsForIdentityOutput.readDirectly(bytes) {
            let reference = try? JSONDecoder().decode(GetCredentialsForIdentityOutput.self, from: Data(bytes))
            precondition(
                reference?.IdentityId == direct.IdentityId && reference?.Credentials.AccessKeyId == direct.Credentials.AccessKeyId
                    && reference?.Credentials.SecretKey == direct.Credentials.SecretKey
                    && reference?.Credentials.SessionToken == direct.Credentials.SessionToken
                    && reference?.Credentials.Expiration.date == direct.Credentials.Expiration.date,
                "GetCredentialsForIdentity read directly differs from JSONDecoder")
        }
    }

    /// Decodes `bytes` as an error response.
    ///
    /// Layout: when `bytes` holds a blank line (`\n\n`), the part before it is
    /// header lines (`name: value`) and the part after it the body; otherwise
    /// all of it is the body. The status comes from the first byte.
    ///
    /// Invariants: the service type, when any, is non-empty, at most 128
    /// characters, without `:` or `#`; the service message is bounded and never
    /// holds a redacted secret; the `Retry-After` hint is never negative.
    static func decodeError(_ bytes: [UInt8]) {
        let statuses = [400, 403, 404, 429, 500, 502, 503, 504, 200, 0, 599, 999, -1, 413]
        let status = statuses[Int(bytes.first ?? 0) % statuses.count]
        var headers: [(name: String, value: String)] = []
        var body = bytes[...]
        if let split = blankLine(in: bytes) {
            body = bytes[(split + 2)...]
            let head = String(decoding: bytes[..<split], as: UTF8.self)
            for line in head.split(separator: "\n") {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers.append((String(line[..<colon]), String(line[line.index(after: colon)...])))
            }
        }
        let response = HTTPResponse(status: status, headers: headers, body: Array(body))
        let error = CognitoErrorDecoder.decode(response: response, operation: "GetId", redacting: [sentinelSecret])
        if let type = error.serviceErrorType {
            precondition(!type.isEmpty && type.count <= 128, "service type not bounded")
            precondition(!type.contains(":") && !type.contains("#"), "service type not normalised")
        }
        if let message = error.serviceMessage {
            precondition(message.count <= CognitoErrorDecoder.maxMessageLength + 1, "service message not bounded")
            precondition(!message.contains(sentinelSecret), "a secret survived redaction")
        }
        _ = RetryClassification.disposition(for: error, service: .cognitoIdentity)
        if let hint = RetryRunner.retryAfterHint(headers: response.headers, now: Date(timeIntervalSince1970: 1_700_000_000)) {
            precondition(hint >= .zero, "negative Retry-After hint")
            let runner = RetryRunner(policy: .standard, quota: RetryQuota(policy: .standard), random: { 0.5 })
            let delay = runner.delay(afterAttempt: 1, hint: hint)
            precondition(delay >= .zero && delay <= RetryPolicy.standard.retryAfterCap, "backoff outside its bounds")
        }
        _ = RetryAfterDate.parse(String(decoding: bytes, as: UTF8.self))
    }

    /// Parses `bytes` as a token, and as the payload of a token with a fixed header.
    ///
    /// Invariant: an error never quotes the token.
    static func parseJWT(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        parse(token: text)
        let payload = Data(bytes).base64EncodedString()
            .replacing("+", with: "-").replacing("/", with: "_").replacing("=", with: "")
        parse(token: "eyJhbGciOiJSUzI1NiJ9.\(payload).c2ln")
    }

    private static func parse(token: String) {
        do {
            let jwt = try JSONWebToken(parsing: token)
            // Any `exp` the token claims, against a range of clocks: never a trap.
            for now in [0, 1_700_000_000, -1e19, 1e300] as [Double] {
                do {
                    try jwt.checkNotExpired(now: Date(timeIntervalSince1970: now))
                } catch {
                    precondition(error.code == .invalidToken, "unexpected error code \(error.code)")
                }
            }
        } catch {
            precondition(error.code == .invalidToken, "unexpected error code \(error.code)")
            if token.count >= 12 {
                precondition(!error.message.contains(token), "an error quoted the token")
            }
        }
    }

    @discardableResult
    private static func check<Output: Decodable>(_ type: Output.Type, _ bytes: [UInt8], operation: String) -> Output? {
        do {
            return try CognitoResponseDecoder.decode(Output.self, from: bytes, operation: operation)
        } catch {
            precondition(error.code == .invalidResponse, "unexpected error code \(error.code)")
            precondition(error.message.count <= 1024, "error message not bounded")
            return nil
        }
    }

    private static func blankLine(in bytes: [UInt8]) -> Int? {
        guard bytes.count >= 2 else { return nil }
        for index in 0..<(bytes.count - 1) where bytes[index] == 0x0A && bytes[index + 1] == 0x0A {
            return index
        }
        return nil
    }
}
