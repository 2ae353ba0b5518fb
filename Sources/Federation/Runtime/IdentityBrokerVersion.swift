/// The library's version, sent in the `User-Agent`.
enum IdentityBrokerVersion {
    static let current = "0.1.0"
}
