/// The library's version, sent in the `User-Agent` and printed by `federate --version`.
package enum IdentityBrokerVersion {
    package static let current = "0.1.0"
}
