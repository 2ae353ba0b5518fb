/// The rule every session name follows, in the library and the `federate` CLI alike.
///
/// 1 to 128 bytes of ASCII letters, digits and `. _ - @ + = , :`, and not `.` or `..`:
/// enough for user IDs, emails and Cognito identity IDs, and nothing that could
/// become a path, a second line in a log, or a shell word.
public enum SessionName {
    /// The longest accepted name, in bytes.
    public static let maxLength = 128

    /// Throws ``FederationError/Code/invalidConfiguration`` when `name` breaks the rule;
    /// the message shows the name with anything unprintable escaped.
    public static func validate(_ name: String) throws(FederationError) {
        guard !isValid(name) else { return }
        guard !name.isEmpty, name.utf8.count <= maxLength else {
            throw FederationError(
                code: .invalidConfiguration,
                message: "a session name must have 1 to \(maxLength) bytes (got \(name.utf8.count))"
            )
        }
        let allowed = name.unicodeScalars.allSatisfy { scalar in
            scalar.isASCII
                && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "._-@+=,:".unicodeScalars.contains(scalar))
        }
        guard allowed, name != ".", name != ".." else {
            throw FederationError(
                code: .invalidConfiguration,
                message: "session name '\(preview(name))' may hold only ASCII letters, digits and . _ - @ + = , : (and is not . or ..)"
            )
        }
    }

    /// Whether `name` follows the rule; what ``validate(_:)`` checks, without an error.
    static func isValid(_ name: String) -> Bool {
        let bytes = name.utf8
        guard !bytes.isEmpty, bytes.count <= maxLength, name != ".", name != ".." else { return false }
        return bytes.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "@"), UInt8(ascii: "+"), UInt8(ascii: "="),
                 UInt8(ascii: ","), UInt8(ascii: ":"):
                true
            default:
                false
            }
        }
    }

    /// The first 32 characters, with control and non-ASCII characters escaped.
    private static func preview(_ name: String) -> String {
        name.unicodeScalars.prefix(32).map { scalar in
            scalar.isASCII && scalar.value >= 0x20 && scalar.value != 0x7F ? String(scalar) : scalar.escaped(asASCII: true)
        }.joined()
    }
}
