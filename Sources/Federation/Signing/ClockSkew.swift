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
    /// The refusals that are about the signature's time: these types always are, and
    /// Cognito's `InvalidSignatureException` is when its message says so ("Signature expired",
    /// "Signature not yet current"); it also reports signatures that are wrong, which say
    /// nothing of clocks.
    static let timeRefusals: Set<String> = ["RequestExpired", "RequestTimeTooSkewed", "RequestInTheFuture"]
    /// How far the service's `Date` must be from the signing time before it is believed: AWS
    /// allows five minutes, so a refusal with less is about something else.
    static let threshold: TimeInterval = 4 * 60

    /// Whether a refusal is about the signature's time.
    static func isTimeRefusal(type: String?, message: String?) -> Bool {
        guard let type else { return false }
        if timeRefusals.contains(type) { return true }
        guard type == "InvalidSignatureException", let message = message?.lowercased() else { return false }
        return message.contains("signature expired") || message.contains("not yet current")
    }

    /// Service time minus host time, in seconds.
    private let offset = Mutex<TimeInterval>(0)

    /// The current time by the service's clock, as last learned.
    func now(local: Date = Date()) -> Date {
        local.addingTimeInterval(offset.withLock { $0 })
    }

    /// Learns the service's clock from a request refused for its time, from the refusal's
    /// `Date` header: taken when it is more than ``threshold`` from the time the request was
    /// signed at; when it is not (a clock between the host and AWS, such as a proxy's, taught
    /// a wrong offset), the host's own clock is trusted again.
    ///
    /// - Parameters:
    ///   - signedAt: The (service) time the refused request was signed at.
    ///   - local: The host's time now.
    /// - Returns: `true` when the offset changed, so that signing again can succeed.
    func learn(
        errorType: String?, message: String?, headers: [(name: String, value: String)], signedAt: Date, local: Date = Date()
    ) -> Bool {
        guard Self.isTimeRefusal(type: errorType, message: message),
              let field = headers.first(where: { $0.name.lowercased() == "date" }),
              let serviceNow = RetryAfterDate.parse(field.value)
        else { return false }
        return offset.withLock { offset in
            if abs(serviceNow.timeIntervalSince(signedAt)) > Self.threshold {
                offset = serviceNow.timeIntervalSince(local)
                return true
            }
            guard offset != 0 else { return false }
            offset = 0
            return true
        }
    }
}
