/// A `postgres://` URL that ``PostgresKeystore/Configuration/init(url:)`` cannot use.
///
/// The error says what is wrong and never repeats the URL's password.
public struct PostgresURLError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong with the URL, without its password.
    public let reason: String

    init(_ reason: String) { self.reason = reason }

    /// `PostgresURLError: ` followed by the reason.
    public var description: String { "PostgresURLError: \(reason)" }
}
