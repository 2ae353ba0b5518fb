import SecureStorage

/// Kinds of failure the client treats apart from the rest of their code.
extension FederationError {
    /// Cognito's answer that the identity is disabled ("Identity '…' is disabled."), as
    /// opposed to forbidden to this caller.
    var isDisabledIdentity: Bool {
        code == .notAuthorized && identityGone && (serviceMessage?.lowercased().contains("disabled") ?? false)
    }

    /// A saved item that exists but cannot be opened or understood: an error for that
    /// session alone, which a new federation or a clear replaces.
    var isUnreadableItem: Bool {
        guard code == .storage else { return false }
        guard let keystoreError else { return true }  // an item in a format this version does not read
        return keystoreError.code == .authenticationFailed || keystoreError.code == .corruptFormat
    }
}
