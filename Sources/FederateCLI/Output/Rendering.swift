import Federation
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The CLI's outputs, written by hand so that key order and shape are exactly the contract's.
package enum Rendering {
    /// The credentials in `format`, with a final newline.
    static func credentials(
        _ credentials: AWSCredentials, format: OutputFormat, identityId: String?, provider: String?, session: String
    ) -> String {
        switch format {
        case .process:
            return object(processFields(credentials))
        case .json:
            let fields = processFields(credentials) + [
                field("IdentityId", identityId), field("Provider", provider), field("Session", session),
            ]
            return object(fields)
        case .env:
            return """
                export AWS_ACCESS_KEY_ID=\(shellQuoted(credentials.accessKeyId))
                export AWS_SECRET_ACCESS_KEY=\(shellQuoted(credentials.secretAccessKey))
                export AWS_SESSION_TOKEN=\(shellQuoted(credentials.sessionToken))

                """
        }
    }

    /// `federate status`: `{"session","state","identityId","provider","expiration"}`, no secrets.
    static func status(_ snapshot: SessionSnapshot) -> String {
        let fields = [
            field("session", snapshot.name),
            field("state", snapshot.state.rawValue),
            field("identityId", snapshot.identityId),
            field("provider", providerName(snapshot)),
            field("expiration", snapshot.expiration.map(iso8601)),
        ]
        return object(fields)
    }

    /// The provider identifier (`google`, `oidc:ISSUER`, …), `guest`, or `nil` with no identity.
    static func providerName(_ snapshot: SessionSnapshot) -> String? {
        if let provider = snapshot.provider { return provider.identifier }
        return snapshot.isGuest ? "guest" : nil
    }

    /// `2026-11-22T01:02:03Z`: UTC, whole seconds (rounded down).
    static func iso8601(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))"
            + "T\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))Z"
    }

    /// `'text'` for a POSIX shell, with `'` written as `'\''`.
    package static func shellQuoted(_ text: String) -> String {
        // A loop, not `replacing(_:with:)`: that goes through generic collection algorithms
        // whose run-time metadata lookups cost a short process more than the output itself.
        // Unicode scalars, not Characters: a `'` followed by a combining mark is one
        // Character that is not equal to "'", yet the shell still ends the quote at its `'`
        // (a credential from a hostile endpoint could then run commands in `eval`).
        var quoted = "'"
        for scalar in text.unicodeScalars {
            if scalar == "'" { quoted += #"'\''"# } else { quoted.unicodeScalars.append(scalar) }
        }
        return quoted + "'"
    }

    /// `{field,field,…}` and a newline; a loop rather than `joined(separator:)`, for the same
    /// reason as in ``shellQuoted(_:)``.
    private static func object(_ fields: [String]) -> String {
        var text = "{"
        for (index, field) in fields.enumerated() {
            if index > 0 { text += "," }
            text += field
        }
        return text + "}\n"
    }

    /// A JSON string literal.
    static func jsonString(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }

    private static func processFields(_ credentials: AWSCredentials) -> [String] {
        [
            "\"Version\":1",
            field("AccessKeyId", credentials.accessKeyId),
            field("SecretAccessKey", credentials.secretAccessKey),
            field("SessionToken", credentials.sessionToken),
            field("Expiration", iso8601(credentials.expiration)),
        ]
    }

    private static func field(_ name: String, _ value: String?) -> String {
        jsonString(name) + ":" + (value.map(jsonString) ?? "null")
    }
}
