import SecureStorage

/// The text of a provider token read from a file or a pipe: what the `federate` CLI
/// hands to ``FederationClient/federate(token:provider:options:session:)``.
///
/// Kept here rather than in the CLI so the libFuzzer target (`Fuzz/BrokerFuzz`) runs the
/// same code on hostile bytes.
package enum ProviderTokenText {
    /// The most bytes read for a token: the longest Cognito takes
    /// (``FederationClient/maximumTokenBytes``) and a line break after it.
    package static let maxBytes = FederationClient.maximumTokenBytes + 2

    /// Why bytes are not a token.
    package enum Problem: Error, Sendable, Equatable {
        case empty
        case tooLarge
        case notUTF8
    }

    /// The token in `bytes`: trailing line breaks dropped (`echo "$TOKEN" > file` adds
    /// one), at most ``maxBytes``, UTF-8. `bytes` is wiped (best effort) either way.
    package static func decode(_ bytes: inout [UInt8]) -> Result<String, Problem> {
        defer { CryptoRuntime.cleanse(&bytes) }
        guard bytes.count <= maxBytes else { return .failure(.tooLarge) }
        var end = bytes.count
        while end > 0, bytes[end - 1] == UInt8(ascii: "\n") || bytes[end - 1] == UInt8(ascii: "\r") {
            end -= 1
        }
        guard end > 0 else { return .failure(.empty) }
        guard let token = String(validating: bytes[..<end], as: UTF8.self) else { return .failure(.notUTF8) }
        return .success(token)
    }
}
