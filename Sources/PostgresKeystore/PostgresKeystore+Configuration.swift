import SecureStorage

extension PostgresKeystore {
    /// Where the PostgreSQL server is and how the keystore uses it; every tuning value has a
    /// documented default that suits a fleet of server tools.
    ///
    /// Build one from its parts or parse a URL with ``init(url:)``:
    ///
    /// ```swift
    /// var configuration = try PostgresKeystore.Configuration(
    ///     url: "postgres://broker:s3cret@db.internal:5432/identity?sslmode=verify-full")
    /// configuration.maximumConnections = 8
    /// ```
    ///
    /// The password is never part of the configuration's `description`, its mirror (`dump`),
    /// any log message or any error.
    public struct Configuration: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
        /// The server's host name or IP address.
        public var host: String
        /// The server's TCP port. Default: 5432.
        public var port: Int
        /// The role to log in as.
        public var username: String
        /// The role's password, or `nil` for none (trust or certificate authentication).
        /// Never shown in any description, log or error.
        public var password: String?
        /// The database, or `nil` for the one named like ``username``.
        public var database: String?
        /// Whether and how TLS is used. Until set (also for a URL without `sslmode`):
        /// ``TLSMode/verifyFull``, or ``TLSMode/disable`` while ``host`` is this machine
        /// (`localhost`, 127.0.0.0/8, `::1`), where nothing crosses a network. The default
        /// follows ``host``: a configuration made for `localhost` and then pointed elsewhere
        /// verifies.
        ///
        /// A keystore opened with ``TLSMode/disable`` or ``TLSMode/prefer`` to a host other
        /// than this machine, which only an explicit choice gives, logs a warning: the
        /// password under `password` or `md5` authentication, session names and the rows cross
        /// the network readable, or alterable by anyone on the path.
        public var tls: TLSMode {
            get { chosenTLS ?? Self.defaultTLS(host: host) }
            set { chosenTLS = newValue }
        }
        /// The mode given explicitly, or `nil` for the default that follows ``host``.
        private var chosenTLS: TLSMode?
        /// A PEM file of the certificate authorities to trust for ``TLSMode/verifyCA`` and
        /// ``TLSMode/verifyFull`` (the URL's `sslrootcert`); the system's roots when `nil`.
        public var rootCertificatePath: String?
        /// The most connections the keystore opens to the server; one of them is held by the
        /// change feed while anyone iterates ``PostgresKeystore/changes()``. At least 2.
        /// Default: 8. (For a moment after an outage, a pool replaced because it was slow to
        /// reconnect can still hold the connections of calls it was serving, at most two
        /// operation timeouts; the keystore's probe opens one more, briefly.)
        public var maximumConnections: Int
        /// How many connections the pool keeps open while idle, from 0 to
        /// ``maximumConnections``. Default: 2, one for the change feed's listener and one for
        /// calls, so that a lone caller's calls (after the pool's first connection) never wait
        /// for a login and the pool starts no idle-timeout timer around each of them.
        ///
        /// A program that makes one call and exits (a command-line tool) sets 0: the pool
        /// then logs in only when a call needs a connection, and not at all for one that
        /// never comes.
        public var minimumConnections: Int
        /// How long opening one connection (TCP, TLS and login) may take. Default: 5 seconds.
        public var connectTimeout: Duration
        /// How long one keystore call (a read, a commit, a migration) may take, waiting for a
        /// connection included, before it fails with ``KeystoreError/Code/storeUnavailable``.
        /// Default: 10 seconds.
        public var operationTimeout: Duration
        /// How often an idle pooled connection runs a keep-alive query, or `nil` (the default)
        /// for none.
        ///
        /// Set it when something between the instances and the server (a NAT gateway, a
        /// firewall) silently drops idle TCP connections; it covers the pool's idle
        /// connections, not the change feed's listening one. Otherwise leave it off: a connection
        /// the server ends (a restart, an administrator's `pg_terminate_backend`) is noticed and replaced without
        /// it, a call that finds its connection gone runs again on another, and the
        /// pool's keep-alive timer is started and cancelled around every operation, which
        /// cost about a fifth of the client's CPU per durable federation at concurrency 1
        /// (docs/performance.md).
        public var keepAliveInterval: Duration?
        /// The longest pause between the change feed's attempts to reconnect after it lost its
        /// connection (each reconnect yields `.all`, which makes clients reload what they
        /// hold); pauses start afresh only after a connection that listened this long. Also
        /// the longest pause between the keystore's own connection attempts while calls find
        /// the server unreachable (while the server answers but refuses, such as a failed
        /// login, they go up to a minute), and how long the pool then has to answer before it
        /// is replaced by a new one: postgres-nio's own retries can lag a minute behind the
        /// server's return. A call still waiting for a connection after this long, from a
        /// pool that meanwhile handed out none and has none in use, starts those attempts
        /// too. Default: 1 second.
        public var reconnectDelay: Duration
        /// How often the change feed checks that its listening connection still hears this
        /// instance's commits, or `nil` (or a duration that is not positive) for never.
        ///
        /// A check passes when a notification on the keystore's channel (this instance's
        /// commits, another instance's commits or checks) reached the listener since the last
        /// check. Otherwise it commits a `NOTIFY` through the pool, as commits are made, which
        /// the listening connection must receive. When that `NOTIFY` cannot be
        /// committed (the server is away, no connection is free in time), and before
        /// `LISTEN` took effect, the listening connection must at least answer a `SELECT 1`.
        /// Each check ends within twice ``operationTimeout``.
        ///
        /// A connection that stays open but carries nothing (a server host that crashed, a
        /// NAT or firewall that dropped the idle flow) never reports an error, nor does one
        /// that answers but no longer hears what this instance commits (left on a server the
        /// pool no longer reaches after a failover moved the address, or behind a pooler in
        /// transaction mode, which does not carry `LISTEN`). Without the check the feed would
        /// wait on it for good, and clients would never hear of other instances' changes
        /// again. A connection that fails the check is closed, and the feed reconnects and
        /// reports ``KeystoreChange/all``; a check whose notification did not arrive also
        /// logs a warning. An idle instance's check notifies every listener of the database,
        /// which skips it by comparing a few bytes and counts it as its own check passed, so
        /// an idle fleet sends about one or two checks per interval, plus each instance one of
        /// its own every six (at least one check in six must hear this instance's own commit or
        /// check, so that a listener left on a server other instances still write to, while
        /// this instance's pool writes to another, is found). Checks are spread between half
        /// the interval and all of it. Default: 10 seconds.
        public var changeFeedHeartbeat: Duration?
        /// How many changes each ``PostgresKeystore/changes()`` stream buffers for a slow
        /// reader; when it overflows, the oldest are dropped and ``KeystoreChange/all``
        /// follows. Default: 1,024.
        public var changeBufferSize: Int
        /// The key file read when the key source is ``KeySource/keyFile``: exactly 32 bytes,
        /// neither group- or world-writable nor world-readable. There is no default, because a
        /// key created per host would differ between the instances of a fleet.
        public var keyFilePath: String?

        /// Creates a configuration from its parts; every other property has its documented
        /// default.
        ///
        /// - Parameters:
        ///   - host: The server's host name or IP address.
        ///   - port: The server's port.
        ///   - username: The role to log in as.
        ///   - password: The role's password, if it has one.
        ///   - database: The database; the one named like `username` when `nil`.
        ///   - tls: Whether and how TLS is used; `nil` for the default, ``TLSMode/verifyFull``
        ///     unless ``host`` is this machine (then ``TLSMode/disable``).
        public init(
            host: String,
            port: Int = 5432,
            username: String,
            password: String? = nil,
            database: String? = nil,
            tls: TLSMode? = nil
        ) {
            self.host = host
            self.port = port
            self.username = username
            self.password = password
            self.database = database
            self.chosenTLS = tls
            self.rootCertificatePath = nil
            self.maximumConnections = 8
            self.minimumConnections = 2
            self.connectTimeout = .seconds(5)
            self.operationTimeout = .seconds(10)
            self.keepAliveInterval = nil
            self.reconnectDelay = .seconds(1)
            self.changeFeedHeartbeat = .seconds(10)
            self.changeBufferSize = 1024
            self.keyFilePath = nil
        }

        /// Throws ``KeystoreError/Code/invalidConfiguration`` for a value with which every
        /// call would fail: an empty host or user name, a port outside 1–65535, a connect or
        /// operation timeout, reconnect delay or keep-alive interval that is not positive.
        func check() throws(KeystoreError) {
            var problems: [String] = []
            if host.isEmpty { problems.append("host is empty") }
            if !(1...65_535).contains(port) { problems.append("port \(port) is not within 1–65535") }
            if username.isEmpty { problems.append("username is empty") }
            for (name, value) in [("connectTimeout", connectTimeout), ("operationTimeout", operationTimeout), ("reconnectDelay", reconnectDelay)]
            where value <= .zero {
                problems.append("\(name) is not positive (\(value))")
            }
            if let keepAliveInterval, keepAliveInterval <= .zero { problems.append("keepAliveInterval is not positive (\(keepAliveInterval)); nil turns it off") }
            guard problems.isEmpty else {
                throw KeystoreError(.invalidConfiguration, "PostgresKeystore.Configuration: " + problems.joined(separator: "; "))
            }
        }

        /// ``TLSMode/verifyFull`` unless `host` is this machine: plaintext is never what a
        /// configuration that says nothing gets across a network.
        static func defaultTLS(host: String) -> TLSMode {
            LoopbackHost.contains(host) ? .disable : .verifyFull
        }

        /// The connections the pool may open: ``maximumConnections``, at least 2 (the change
        /// feed holds one while subscribed).
        var poolSize: Int { max(2, maximumConnections) }

        /// ``minimumConnections`` within 0 and ``poolSize``.
        var poolMinimum: Int { min(max(0, minimumConnections), poolSize) }

        /// What the keystore warns of at open when its connections can go unprotected to a
        /// host other than this machine (``tls`` ``TLSMode/disable`` or ``TLSMode/prefer``,
        /// which an attacker on the path can turn into plaintext); `nil` otherwise.
        var unprotectedTransportWarning: String? {
            guard !tls.isRequired, !LoopbackHost.contains(host) else { return nil }
            return "connections to \(endpoint) are not protected by TLS (sslmode=\(tls)): the password, session names and sealed rows "
                + "cross the network readable and alterable by anyone on the path; use sslmode=verify-full"
        }

        /// `host:port` (IPv6 addresses in brackets), the name errors and logs use for the
        /// server.
        public var endpoint: String {
            host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        }

        /// The configuration as a URL without its password, for example
        /// `postgres://broker@db.internal:5432/identity?sslmode=verify-full`.
        public var description: String {
            var text = "postgres://\(Self.escape(username))@\(endpoint)"
            if let database { text += "/\(Self.escape(database))" }
            text += "?sslmode=\(tls)"
            return text
        }

        /// The same as ``description``: no password.
        public var debugDescription: String { description }

        /// A mirror without the password, so `dump` and reflection cannot show it.
        public var customMirror: Mirror {
            Mirror(self, children: [
                "host": host, "port": port, "username": username,
                "password": password == nil ? "nil" : "<redacted>",
                "database": database as Any, "tls": tls, "rootCertificatePath": rootCertificatePath as Any,
                "maximumConnections": maximumConnections, "minimumConnections": minimumConnections,
                "connectTimeout": connectTimeout,
                "operationTimeout": operationTimeout, "keepAliveInterval": keepAliveInterval as Any,
                "reconnectDelay": reconnectDelay, "changeFeedHeartbeat": changeFeedHeartbeat as Any,
                "changeBufferSize": changeBufferSize,
                "keyFilePath": keyFilePath as Any,
            ])
        }

        /// Percent-encodes what a URL's user or path part cannot hold as is.
        private static func escape(_ text: String) -> String {
            var escaped = ""
            for byte in text.utf8 {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                     UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                     UInt8(ascii: "_"), UInt8(ascii: "~"):
                    escaped.unicodeScalars.append(Unicode.Scalar(byte))
                default:
                    let hex = Array("0123456789ABCDEF".utf8)
                    escaped += "%" + String(decoding: [hex[Int(byte >> 4)], hex[Int(byte & 0xF)]], as: UTF8.self)
                }
            }
            return escaped
        }
    }
}
