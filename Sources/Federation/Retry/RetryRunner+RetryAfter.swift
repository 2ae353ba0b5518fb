#if canImport(FoundationEssentials)
package import FoundationEssentials
#else
package import Foundation
#endif
import SecureStorage

extension RetryRunner {
    /// The wait a response asks for before the next attempt, if it names one.
    ///
    /// Reads `x-amz-retry-after` (whole milliseconds) first, as it is the more
    /// precise; when it is missing or malformed, reads `Retry-After` (whole
    /// seconds, or an HTTP-date in any of the three forms RFC 9110 requires:
    /// IMF-fixdate, RFC 850 and asctime). Header names match case-insensitively;
    /// the first field of each name counts. A date in the past gives `.zero`.
    /// The result is not capped here: ``run(deadline:logger:operation:classify:)``
    /// cuts it to ``RetryPolicy/retryAfterCap``.
    ///
    /// - Parameters:
    ///   - headers: The response's header fields.
    ///   - now: The current time, for an HTTP-date.
    /// - Returns: The wait, or `nil` when neither header holds a valid value.
    package static func retryAfterHint(headers: [(name: String, value: String)], now: Date) -> Duration? {
        func first(_ name: String) -> Substring? {
            headers.first { $0.name.lowercased() == name }.map(\.value.trimmingSpacesAndTabs)
        }
        if let value = first("x-amz-retry-after"), let milliseconds = Self.nonNegativeInteger(value) {
            return .milliseconds(milliseconds)
        }
        guard let value = first("retry-after") else { return nil }
        if let seconds = Self.nonNegativeInteger(value) {
            return .seconds(seconds)
        }
        guard let date = RetryAfterDate.parse(value) else { return nil }
        let interval = date.timeIntervalSince(now)
        return interval > 0 ? .seconds(interval) : .zero
    }

    /// Values past this many units are clamped; any cap cuts them anyway.
    private static let integerLimit: Int64 = 1_000_000_000_000

    /// A run of ASCII digits as a number, clamped to ``integerLimit``.
    private static func nonNegativeInteger(_ text: Substring) -> Int64? {
        guard !text.isEmpty else { return nil }
        var value: Int64 = 0
        for byte in text.utf8 {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = min(value * 10 + Int64(byte - UInt8(ascii: "0")), integerLimit)
        }
        return value
    }
}
