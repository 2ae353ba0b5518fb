public import ArgumentParser

/// `--expiry-margin SECONDS`, defaulting to 30 s: against moto, whose credentials last
/// 90 s, that leaves a minute to run a flow.
///
/// A sample whose story depends on another margin (`sample-observe` wants credentials
/// to expire within seconds) declares its own `--expiry-margin` instead.
public struct ExpiryMarginOptions: ParsableArguments, Sendable {
    @Option(help: "Credentials count as expired this many seconds early (moto issues 90 s credentials).")
    public var expiryMargin: Double = 30

    public init() {}

    public func validate() throws {
        try Self.check(expiryMargin)
    }

    /// Refuses a margin that is not a number of seconds from 0 to a day (a longer one would
    /// count every credential as expired; `nan` or `inf` cannot become a duration).
    public static func check(_ expiryMargin: Double) throws {
        guard expiryMargin.isFinite, (0...86_400).contains(expiryMargin) else {
            throw ValidationError("--expiry-margin must be a number of seconds from 0 to 86400")
        }
    }
}
