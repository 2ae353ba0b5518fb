#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import Federation
import SecureStorage

extension CLIFailure {
    /// A configuration the library refused: a usage error (exit 2) that says what to fix.
    static func invalidConfiguration(_ error: FederationError) -> CLIFailure {
        // Every failure line says what to do; most of these messages name the bad value only.
        let next = error.message.contains("; ") ? "" : "; fix that option (see 'federate help')"
        return CLIFailure(.usage, "\(error.message)\(next)")
    }

    /// Maps a library error to the contract's exit codes, with a next step.
    ///
    /// - 2: ``FederationError/Code/invalidToken``, ``FederationError/Code/invalidConfiguration``,
    ///   ``FederationError/Code/sessionConflict`` (clear the session first)
    /// - 3: ``FederationError/Code/noValidCredentials``
    /// - 4: the service said no (not authorized, terminated identity, resource not found,
    ///   invalid pool configuration, invalid parameter, conflicts and limits, an unknown error type;
    ///   STS refusing the classic flow's role, STS disabled in the region)
    /// - 5: network, timeout, throttling, 5xx, an answer that could not be read, a 4xx with no
    ///   AWS error type (a wrong endpoint), a failing provider behind the service
    /// - 6: ``FederationError/Code/storage``
    /// - 1: anything else
    package static func federation(_ error: FederationError, root: String) -> CLIFailure {
        let detail = serviceDetail(error)
        let service = error.operation == STSOperation.name
            ? (name: "STS", endpointOption: "--sts-endpoint")
            : (name: "the identity service", endpointOption: "--endpoint")
        switch error.code {
        case .invalidToken:
            return CLIFailure(.usage, "\(error.message); check --provider and the token")
        case .invalidConfiguration:
            return invalidConfiguration(error)
        case .sessionConflict:
            // The library's advice, in the command's words.
            let clear = "run 'federate clear' with the same --session first"
            let said = error.message.replacing("clear the session first", with: clear)
            return CLIFailure(.usage, said == error.message ? "\(error.message): \(clear), then try again" : "\(said), then try again")
        case .noValidCredentials:
            return CLIFailure(.noValidCredentials, "\(error.message)")
        case .identityTerminated:
            return CLIFailure(.rejected, "\(error.message)\(detail)")
        case .notAuthorized, .resourceNotFound, .invalidIdentityPoolConfiguration, .invalidParameter,
            .resourceConflict, .limitExceeded, .developerUserAlreadyRegistered, .regionDisabled:
            return CLIFailure(.rejected, "\(service.name) rejected the request: \(error.message)\(detail); \(Self.rejectedAdvice)")
        case .serviceError:
            if let status = error.httpStatus, status >= 500 {
                return CLIFailure(.unavailable, "\(service.name) failed: \(error.message)\(detail); try again later, and if it persists check \(service.endpointOption) and --region")
            }
            // No AWS error type: not the service's answer (a web server's or a proxy's page at a
            // wrong endpoint), so nothing about the token or the pool to check.
            // (413, "request too large", is said of the request, by the service's front end too.)
            guard error.serviceErrorType != nil || error.httpStatus == 413 else {
                return CLIFailure(.unavailable, "\(service.name) answered with no AWS error\(detail): \(error.message); check \(service.endpointOption) and --region")
            }
            return CLIFailure(.rejected, "\(service.name) rejected the request: \(error.message)\(detail); \(Self.rejectedAdvice)")
        case .serviceUnavailable where error.serviceErrorType == nil && !RetryClassification.retriesServiceFailure(status: error.httpStatus):
            // A 501, 505…: not retried, and no AWS service answers so without an error type;
            // most likely a web server at a wrong endpoint.
            return CLIFailure(.unavailable, "\(service.name) answered with no AWS error\(detail): \(error.message); check \(service.endpointOption) and --region")
        case .throttled, .serviceUnavailable, .timedOut, .network, .invalidResponse, .externalService:
            return CLIFailure(.unavailable, "\(service.name) is unavailable: \(error.message)\(detail); if it persists, check \(service.endpointOption), --region and the network")
        case .storage:
            if let keystoreError = error.keystoreError {
                return keystore(keystoreError, root: root, context: error.message)
            }
            return CLIFailure(.keystore, "keystore at \(root): \(error.message)")
        case .cancelled:
            return CLIFailure(.internalError, "\(error.message)")
        default:
            return CLIFailure(.internalError, "unexpected error \(error.code): \(error.message); please report it")
        }
    }

    /// Maps a keystore error (any error thrown while opening or migrating) to exit 6,
    /// saying what to do for each cause.
    package static func keystore(_ error: any Error, root: String, context: String? = nil) -> CLIFailure {
        guard let error = error as? KeystoreError else {
            return CLIFailure(.keystore, "keystore at \(root) failed: \(type(of: error)); check the keystore (directory or database)")
        }
        // The library's advice names its Swift API; a CLI user sets the variable instead.
        let described = "\(error)".replacing(
            "see SQLiteKeystore.Configuration.checksWayToRoot", with: "set \(KeystoreAccess.wayToRootCheckVariable)=off")
        let what = context.map { "\($0) (\(described))" } ?? described
        let next: String
        switch error.code {
        case .authenticationFailed:
            next = "an item was tampered with or the key is wrong: check $IDENTITY_BROKER_KEY or the key file, or clear the session and log in again"
        case .corruptFormat:
            next = "for a damaged session, 'federate clear' it and log in again; for a damaged database or salt file (the path above), move it aside or restore it from a backup, then log in again"
        case .insecurePermissions where error.reason.hasPrefix(KeystoreError.unsafeWayToRootReason)
            && error.reason.contains(KeystoreError.unstickyWayToRootReason):
            next = "in a container whose volume no other user shares, \(KeystoreAccess.wayToRootCheckVariable)=off skips the directories above the keystore directory"
        case .insecurePermissions where error.reason.hasPrefix("expected a directory"):
            next = "the path above must be a directory of yours (not a file or a link): choose another --keystore, or move what is there aside"
        case .insecurePermissions where error.reason.contains("belongs to another user"):
            next = "the path above must be yours (or root's): chown it to yourself, or choose another --keystore"
        case .insecurePermissions:
            next = "fix the permissions of the path above (private: chmod 700 on directories, chmod 600 on files; a shared access group: 2770 directories, 0660 databases, 0640 key files), or choose another --keystore"
        case .invalidKey:
            next = KeySelection.advice(forRefusedKey: error)
        case .invalidName:
            // A name the options let through but the keystore refuses: bad local input.
            return CLIFailure(.usage, "keystore at \(root): \(what); check --session, --access-group and --keystore")
        case .storeUnavailable where KeystoreLocation.isDatabaseURL(root)
            && (error.reason.contains(KeystoreError.standbyServerReason) || error.reason.contains(KeystoreError.readOnlyServerReason)):
            next = "the database takes no writes there: point --keystore at the primary (after a failover, the new one), or lift default_transaction_read_only, then try again"
        case .storeUnavailable where KeystoreLocation.isDatabaseURL(root):
            let server = error.path.map { " at \($0)" } ?? ""
            next = "the database\(server) cannot be reached: check that it is running and reachable (host, port, TLS, user and password in --keystore), then try again"
        case .storeUnavailable where error.errno == EACCES || error.errno == EPERM:
            next = "this user may not open the keystore's database: check its owner and mode and those of its directory (private: yours, 0600 in a 0700 directory; a shared access group: 0660 in a 2770 directory of a Unix group you are in), or choose another --keystore"
        case .storeUnavailable:
            next = "the keystore's database could not be opened or stayed locked: check that the keystore directory is on a writable disk with room, that nothing inside it is a link, and that no hung process holds it, then try again"
        case .io where error.errno == EROFS:
            next = "mount the keystore directory read-write (the embedded store cannot be read from a read-only mount), or choose another --keystore"
        default:
            next = "check the keystore directory and its permissions"
        }
        return CLIFailure(.keystore, "keystore at \(root): \(what); \(next)")
    }

    /// The one STS operation the classic flow calls.
    private enum STSOperation { static let name = "AssumeRoleWithWebIdentity" }

    /// What to check when the identity service or STS refuses a request.
    private static let rejectedAdvice = "check the token and --provider, --pool-id and the pool's identity providers, and --role-arn against the pool's role rules"

    /// `; service said: Type: message` when the service answered with one.
    private static func serviceDetail(_ error: FederationError) -> String {
        var parts: [String] = []
        if let type = error.serviceErrorType { parts.append(type) }
        if let message = error.serviceMessage, !message.isEmpty { parts.append(String(message.prefix(200))) }
        if parts.isEmpty, let status = error.httpStatus { parts.append("HTTP \(status)") }
        return parts.isEmpty ? "" : " (service said: \(parts.joined(separator: ": ")))"
    }
}
