import NIOCore
import NIOPosix
import PostgresNIO
import SecureStorage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension KeystoreError {
    /// Maps a failure talking to PostgreSQL to a ``KeystoreError`` whose ``path`` is the
    /// server's `host:port`.
    ///
    /// Connection failures (refused, closed, reset, TLS, login, the pool giving up, a
    /// server shutting down) give ``Code/storeUnavailable``; other server errors give
    /// ``Code/io`` with SQLSTATE and the server's message (which names tables and
    /// constraints, never bound values). The reason is built from error codes and server
    /// messages only, and any occurrence of the password is removed as well.
    /// What a failed TLS handshake most often means, where the mode checks certificates:
    /// `verify-full` is the default for a server on another machine, and a private CA (or a
    /// cloud provider's) is not among the system's roots.
    static func certificateHint(_ configuration: PostgresKeystore.Configuration) -> String {
        guard configuration.tls.verifiesCertificate || configuration.rootCertificatePath != nil else { return "" }
        return " (sslmode=\(configuration.tls) checks the server's certificate against "
            + (configuration.rootCertificatePath == nil ? "the system's trusted roots" : "sslrootcert")
            + (configuration.tls.verifiesHostName ? " and its host name" : "")
            + "; give the server's CA with sslrootcert, or choose another sslmode)"
    }

    static func postgres(
        _ error: any Error, operation: String, configuration: PostgresKeystore.Configuration
    ) -> KeystoreError {
        let endpoint = configuration.endpoint
        if let error = error as? KeystoreError { return error }
        var code: Code = .storeUnavailable
        var detail: String
        if let error = error as? PSQLError {
            switch error.code {
            case .server:
                let state = error.serverInfo?[.sqlState] ?? "?????"
                let message = error.serverInfo?[.message] ?? "no message"
                detail = "server error \(state): \(message)"
                if state == "57014" {
                    // statement_timeout (ConnectionSetup): the server cancelled it; nothing applied.
                    detail += " (the statement took longer than the operation timeout; nothing of it was applied unless the"
                        + " timeout came while it was committing)"
                } else if state == readOnlySQLState {
                    // read_only_sql_transaction: the connection is closed (`run`), so a new one
                    // sees the server's and the role's settings as they are now.
                    detail += " (\(KeystoreError.readOnlyServerReason): a standby, for instance after a failover, or"
                        + " default_transaction_read_only; the URL must reach the primary)"
                } else if state == "42501" {
                    detail += " (the role lacks a privilege: a fleet's role needs the rights RunningAFleet lists, and"
                        + " creating or upgrading the schema needs a role that may create in it, such as its owner)"
                }
                code = isUnavailable(sqlState: state) ? .storeUnavailable : .io
            case .connectionError:
                detail = "cannot connect" + (error.underlying.map { ": \(Self.connectionFailure($0, endpoint: endpoint))" } ?? "")
                if error.underlying is NIOSSLError || error.underlying is BoringSSLError {
                    detail += Self.certificateHint(configuration)
                }
            case .serverClosedConnection, .uncleanShutdown:
                detail = "the server closed the connection"
            case .clientClosedConnection, .poolClosed:
                detail = "the connection was closed"
            case .sslUnsupported:
                detail = "the server does not support TLS, which sslmode=\(configuration.tls) requires"
                    + " (verify-full is the default for a server on another machine; sslmode=disable sends the password and rows unprotected)"
            case .failedToAddSSLHandler:
                detail = "TLS could not be set up" + (error.underlying.map { ": \(String(describing: $0))" } ?? "")
                    + Self.certificateHint(configuration)
            case .unsupportedAuthMechanism, .authMechanismRequiresPassword, .saslError:
                detail = "login failed (\(error.code))"
            case .queryCancelled:
                detail = "the query was cancelled"
            default:
                code = .io
                detail = "\(error.code)"
            }
        } else if let error = error as? UnusableCommitProcedure {
            switch error {
            case .planted, .overloaded: code = .insecurePermissions
            case .notCallable, .missing: code = .io
            }
            detail = error.description
        } else if let error = error as? StandbyServer {
            detail = error.description
        } else if let error = error as? UnsupportedServer {
            code = .io
            detail = error.description
        } else if let error = error as? UntrustedTables {
            code = .insecurePermissions
            detail = error.description
        } else if error is CancellationError {
            detail = "the operation was cancelled"
        } else {
            // The pool's own errors (circuit breaker tripped, shut down) and NIO's I/O errors.
            detail = String(describing: error)
        }
        // Any 16 characters of the password, or the whole of a shorter one; one under 4
        // characters is not looked for, since replacing a letter everywhere would spell it out.
        if let password = configuration.password {
            detail = SecretRedactor(secrets: [password]).redact(detail)
        }
        return KeystoreError(code, "PostgreSQL at \(endpoint): \(operation) failed: \(detail)", path: endpoint)
    }

    /// Why a connection could not be made, in words (NIO's own descriptions nest the
    /// address tried and the errno's name inside one another).
    static func connectionFailure(_ error: any Error, endpoint: String) -> String {
        if let error = error as? NIOConnectionError {
            if let lookup = error.dnsAError ?? error.dnsAAAAError {
                return "the host name \(error.host) did not resolve (\(connectionFailure(lookup, endpoint: endpoint)))"
            }
            var reasons: [String] = []
            for failure in error.connectionErrors {
                let reason = connectionFailure(failure.error, endpoint: endpoint)
                if !reasons.contains(reason) { reasons.append(reason) }
            }
            return reasons.isEmpty ? "no address of \(error.host) could be tried" : reasons.joined(separator: "; ")
        }
        if let error = error as? IOError {
            let text = String(cString: strerror(error.errnoCode)).lowercased()
            switch error.errnoCode {
            case ECONNREFUSED: return "\(text) (nothing accepts connections at \(endpoint): is the server running, on that port?)"
            case ENETUNREACH, EHOSTUNREACH: return "\(text) (no route from this machine to \(endpoint))"
            default: return text
            }
        }
        if let error = error as? ChannelError, case .connectTimeout(let amount) = error {
            return "no answer from \(endpoint) within \(amount.nanoseconds / 1_000_000) ms (a firewall dropping packets, or a host that is down)"
        }
        return String(describing: error)
    }

    /// Connection exceptions (class 08), insufficient resources (53), operator
    /// intervention such as a shutdown (57P01–57P05) or a cancelled statement (57014: the
    /// statement timeout), failed logins (28) and a read-only server (25006: a standby the
    /// URL still reaches after a failover) mean the store is unavailable rather than broken.
    private static func isUnavailable(sqlState: String) -> Bool {
        sqlState.hasPrefix("08") || sqlState.hasPrefix("53") || sqlState.hasPrefix("57") || sqlState.hasPrefix("28")
            || sqlState == readOnlySQLState
    }

    /// SQLSTATE `read_only_sql_transaction`.
    private static let readOnlySQLState = "25006"

    /// Whether the server refused a write because the server or the role is read-only, for
    /// as long as the connection lasts (the role's and the database's settings are read when
    /// it starts).
    static func isReadOnlyServer(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, error.code == .server else { return false }
        return error.serverInfo?[.sqlState] == readOnlySQLState
    }

    /// Whether the server aborted the statement as a deadlock victim (SQLSTATE 40P01), which
    /// rolled it back.
    static func isDeadlock(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, error.code == .server else { return false }
        return error.serverInfo?[.sqlState] == "40P01"
    }

    /// Whether the error is a connection that died under a statement before anything was
    /// committed, so the operation can run again on another connection.
    static func isRetryableConnectionLoss(_ error: any Error) -> Bool {
        if error is StaleConnection || error is RetiredPool { return true }
        guard let error = error as? PSQLError else { return false }
        switch error.code {
        case .serverClosedConnection, .uncleanShutdown, .clientClosedConnection, .connectionError: return true
        case .server: return error.serverInfo?[.sqlState].map { $0.hasPrefix("57P") || $0.hasPrefix("08") } ?? false
        default: return false
        }
    }
}
