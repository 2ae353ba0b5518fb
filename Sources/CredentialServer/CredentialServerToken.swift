/// The bearer token a ``CredentialServer`` requires in every request's `Authorization`
/// header: 256 random bits from the system's cryptographically secure generator, written
/// as 64 lowercase hexadecimal characters.
///
/// Hand ``value`` to the child process (as `AWS_CONTAINER_AUTHORIZATION_TOKEN`, see
/// ``CredentialEndpoint/environment``) and nowhere else: the library never prints or logs
/// it, and `description`, `debugDescription`, string interpolation and `dump` show
/// `<redacted>`.
public struct CredentialServerToken: Sendable {
    /// The token as sent in the `Authorization` header: 64 lowercase hexadecimal characters.
    public let value: String

    /// How many random bytes a token holds.
    public static let byteCount = 32

    /// A new token of ``byteCount`` bytes from `SystemRandomNumberGenerator`, which reads
    /// the kernel's CSPRNG (`getrandom(2)` on Linux, `arc4random_buf` on Apple systems).
    public static func random() -> CredentialServerToken {
        var generator = SystemRandomNumberGenerator()
        return random(using: &generator)
    }

    /// A token from `generator`, for tests; production code uses ``random()``.
    static func random(using generator: inout some RandomNumberGenerator) -> CredentialServerToken {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(byteCount * 2)
        for _ in 0..<byteCount {
            let byte = UInt8.random(in: .min ... .max, using: &generator)
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return CredentialServerToken(value: String(decoding: text, as: UTF8.self))
    }

    /// ``value``'s bytes, kept for the comparisons of every request.
    private let bytes: [UInt8]

    init(value: String) {
        self.value = value
        bytes = Array(value.utf8)
    }

    /// Whether an `Authorization` header value presents this token: the token itself (as
    /// the AWS SDKs send `AWS_CONTAINER_AUTHORIZATION_TOKEN`) or `Bearer <token>`.
    ///
    /// The comparison takes the same time whatever the position of the first differing
    /// byte (``ConstantTime/equals(_:_:)``), so response times tell nothing about the token.
    public func isPresented(in authorization: String?) -> Bool {
        guard let authorization, let presented = Self.presented(in: authorization) else { return false }
        return matches(presented)
    }

    /// Whether `presented` (from ``presented(in:)``) is this token, in constant time.
    func matches(_ presented: [UInt8]) -> Bool {
        ConstantTime.equals(presented, bytes)
    }

    /// The token bytes an `Authorization` value presents (the value itself, or what follows
    /// `Bearer `, in any case), or `nil` when its length cannot be a token's. Looked at by
    /// length first, which is public (every token has 64 characters): a long value costs no
    /// more than a short one, so the time of a refusal tells nothing.
    static func presented(in authorization: String) -> [UInt8]? {
        let bytes = authorization.utf8
        let tokenLength = byteCount * 2
        let bearer = "bearer ".utf8
        switch bytes.count {
        case tokenLength:
            return Array(bytes)
        case bearer.count + tokenLength:
            let scheme = bytes.prefix(bearer.count)
            let lowered = scheme.map { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) ? $0 | 0x20 : $0 }
            guard lowered.elementsEqual(bearer) else { return nil }
            return Array(bytes.dropFirst(bearer.count))
        default:
            return nil
        }
    }
}

extension CredentialServerToken: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// Always `<redacted>`.
    public var description: String { "<redacted>" }

    /// Always `CredentialServerToken(<redacted>)`.
    public var debugDescription: String { "CredentialServerToken(<redacted>)" }

    /// Keeps `dump` and debugger views from showing the token.
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}
