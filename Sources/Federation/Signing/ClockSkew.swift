#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Synchronization

/// The service's clock as learned from a refused signature, so that the next signature
/// carries the service's time, as the AWS SDKs do. AWS refuses a signature more than five
/// minutes from its own clock: without this, a host whose clock drifted (a virtual machine
/// resumed, NTP broken) has every signed request refused until someone fixes the clock.
final class ClockSkew: Sendable {
    /// The refusals a skewed clock causes (Cognito answers `InvalidSignatureException`
    /// "Signature expired"; other services the other types).
    static let refusals: Set<String> = [
        "InvalidSignatureException", "SignatureDoesNotMatch", "RequestExpired", "RequestTimeTooSkewed", "RequestInTheFuture",
    ]
    /// How far the service's `Date` must be from the host's before it is believed: AWS
    /// allows five minutes, so a refusal with less is about something else.
    static let threshold: TimeInterval = 4 * 60

    /// Service time minus host time, in seconds.
    private let offset = Mutex<TimeInterval>(0)

    /// The current time by the service's clock, as last learned.
    func now(local: Date = Date()) -> Date {
        local.addingTimeInterval(offset.withLock { $0 })
    }

    /// Learns the service's clock from a refused request: a refusal a skewed clock causes,
    /// whose `Date` header is more than ``threshold`` from the time it was signed at.
    ///
    /// - Parameters:
    ///   - signedAt: The (service) time the refused request was signed at.
    ///   - local: The host's time now.
    /// - Returns: `true` when the offset changed, so that signing again can succeed.
    func learn(errorType: String?, headers: [(name: String, value: String)], signedAt: Date, local: Date = Date()) -> Bool {
        guard let errorType, Self.refusals.contains(errorType),
              let field = headers.first(where: { $0.name.lowercased() == "date" }),
              let serviceNow = RetryAfterDate.parse(field.value)
        else { return false }
        guard abs(serviceNow.timeIntervalSince(signedAt)) > Self.threshold else { return false }
        offset.withLock { $0 = serviceNow.timeIntervalSince(local) }
        return true
    }
}
