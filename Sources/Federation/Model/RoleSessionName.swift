/// The role session name STS records for a classic-flow federation.
///
/// STS takes 2 to 64 characters of `[A-Za-z0-9_+=,.@-]`. When
/// ``ClassicFlowOptions/roleSessionName`` is `nil` the name is derived from the session
/// name, deterministically, so the same session always shows up under the same name in
/// CloudTrail:
/// - each character outside that set (in session names, only `:`) becomes `_`;
/// - a one-character name is padded with `_` to two;
/// - a name longer than 64 characters keeps its first 55, then `-` and 8 hex digits of a
///   hash (FNV-1a) of the whole session name, so long names that share a prefix stay apart.
public enum RoleSessionName {
    /// The shortest name STS accepts.
    public static let minimumLength = 2
    /// The longest name STS accepts.
    public static let maximumLength = 64

    /// Whether STS accepts `name` as a role session name.
    public static func isValid(_ name: String) -> Bool {
        (minimumLength...maximumLength).contains(name.utf8.count) && name.utf8.allSatisfy(isAllowed)
    }

    /// The role session name derived from `session` (see the type's rules).
    public static func derived(from session: String) -> String {
        var bytes = session.utf8.map { isAllowed($0) ? $0 : UInt8(ascii: "_") }
        // A non-ASCII character is several bytes, each mapped; fine, since names are ASCII by rule.
        if bytes.count > maximumLength {
            var hash: UInt32 = 0x811C_9DC5
            for byte in session.utf8 {
                hash ^= UInt32(byte)
                hash = hash &* 0x0100_0193
            }
            let hex = String(hash, radix: 16)
            let digest = String(repeating: "0", count: 8 - hex.count) + hex
            bytes = Array(bytes.prefix(maximumLength - 9)) + [UInt8(ascii: "-")] + Array(digest.utf8)
        }
        while bytes.count < minimumLength { bytes.append(UInt8(ascii: "_")) }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func isAllowed(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        case UInt8(ascii: "_"), UInt8(ascii: "+"), UInt8(ascii: "="), UInt8(ascii: ","), UInt8(ascii: "."),
            UInt8(ascii: "@"), UInt8(ascii: "-"):
            true
        default:
            false
        }
    }
}
