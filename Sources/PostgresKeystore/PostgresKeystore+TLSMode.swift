extension PostgresKeystore {
    /// Whether and how connections to the server use TLS, named after libpq's `sslmode`.
    ///
    /// | mode | encrypted | server certificate checked |
    /// |---|---|---|
    /// | ``disable`` | never | – |
    /// | ``prefer`` | when the server offers it | no |
    /// | ``require`` | always | no, unless a root certificate file is given: then the chain (as libpq's `require`) |
    /// | ``verifyCA`` | always | chain to a trusted root, host name not checked |
    /// | ``verifyFull`` | always | chain and host name |
    ///
    /// Use ``verifyFull`` whenever the server is reached over a network you do not control;
    /// ``require`` protects against eavesdropping only, not against an impostor.
    public struct TLSMode: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case disable
            case prefer
            case require
            case verifyCA = "verify-ca"
            case verifyFull = "verify-full"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Plain TCP: the default only for a server on this machine (see
        /// ``Configuration/tls``).
        public static let disable = TLSMode(.disable)
        /// TLS when the server supports it, without checking its certificate.
        public static let prefer = TLSMode(.prefer)
        /// TLS always, without checking the server's certificate unless
        /// ``Configuration/rootCertificatePath`` is set, which makes it ``verifyCA`` (as libpq's
        /// `require` with a root certificate file).
        public static let require = TLSMode(.require)
        /// TLS always; the certificate must chain to a trusted root, whatever host it names.
        public static let verifyCA = TLSMode(.verifyCA)
        /// TLS always; the certificate must chain to a trusted root and name the host. The
        /// default for a server on another machine.
        public static let verifyFull = TLSMode(.verifyFull)

        /// The mode for an `sslmode` value (`disable`, `allow`, `prefer`, `require`,
        /// `verify-ca`, `verify-full`), or `nil` for anything else. `allow` reads as
        /// ``prefer``.
        public init?(sslmode: String) {
            if sslmode == "allow" {
                self = .prefer
                return
            }
            guard let base = Base(rawValue: sslmode) else { return nil }
            self.init(base)
        }

        /// The `sslmode` spelling, for example `verify-full`.
        public var description: String { base.rawValue }

        /// Whether the server's certificate chain is checked.
        var verifiesCertificate: Bool { base == .verifyCA || base == .verifyFull }
        /// Whether the host name in the server's certificate is checked.
        var verifiesHostName: Bool { base == .verifyFull }
        /// Whether a connection without TLS is refused.
        var isRequired: Bool { base != .disable && base != .prefer }
    }
}
