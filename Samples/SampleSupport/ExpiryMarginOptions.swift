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
}
