public import ArgumentParser
public import Federation
public import Logging

/// The options every sample takes to reach Cognito Identity: `--endpoint`, `--pool-id`
/// and `--verbose`.
///
/// Use it as `@OptionGroup var options: SampleOptions`, then build the configuration
/// and logger from it. The expiry margin is not here: its default is part of each
/// flow's story (see ``ExpiryMarginOptions``).
public struct SampleOptions: ParsableArguments, Sendable {
    @Option(help: "The Cognito Identity endpoint, e.g. http://127.0.0.1:5000/ for moto. Omit for AWS.")
    public var endpoint: String?

    @Option(help: "The identity pool ID, REGION:GUID.")
    public var poolId: String

    @Flag(help: "Show the library's (and keystore's) debug log (never secret) on stderr.")
    public var verbose = false

    public init() {}

    /// The client configuration for this pool and endpoint, credentials counting as
    /// expired `expiryMargin` seconds before their expiration.
    public func configuration(expiryMargin: Double) -> FederationConfiguration {
        FederationConfiguration(
            identityPoolId: poolId,
            endpoint: endpoint,
            expiryMargin: .milliseconds(Int64(expiryMargin * 1000))
        )
    }

    /// A stderr logger named `label`: debug messages with `--verbose`, else warnings only.
    public func logger(label: String) -> Logger {
        var logger = Logger(label: label, factory: { StreamLogHandler.standardError(label: $0) })
        logger.logLevel = verbose ? .debug : .warning
        return logger
    }
}
