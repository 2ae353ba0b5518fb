extension SQLiteKeystore {
    /// Tuning and policy for an ``SQLiteKeystore``; every default suits a server tool.
    public struct Configuration: Sendable, Hashable {
        /// How long a statement waits for another process's lock before the operation fails
        /// with ``KeystoreError/Code/storeUnavailable``. Default: 5 seconds.
        public var busyTimeout: Duration

        /// How often, while a stream ``SQLiteKeystore/changes()`` returned exists, the store is checked
        /// for commits by other processes. Default: 100 milliseconds.
        public var changePollInterval: Duration

        /// Whether opening the keystore moves the service's items from the access group it
        /// used last (recorded in the user's private database) into the configured one.
        /// Default: `false`: a new group starts empty and the old items stay where they are.
        /// This is the only switch: an ``AccessGroup`` names a group and carries no policy.
        public var moveItemsFromPreviousGroup: Bool

        /// About how many change-log rows are kept for other processes' change feeds (trimmed
        /// by any writer once the log holds a tenth more). A subscriber that falls further behind receives
        /// ``KeystoreChange/all``. Default: 10,000.
        public var changeLogRetention: Int

        /// Whether opening checks the way to the root: every directory and link on it must
        /// belong to root or this user, and one that others can write must be sticky, so that
        /// no other user can move, withhold or roll back the private directories under it.
        /// Default: `true`.
        ///
        /// Set it to `false` only where no other user can reach the directories above the root:
        /// a container whose volume only this application mounts, such as a Kubernetes
        /// `emptyDir` (mode 0777) or a volume under `fsGroup` (group-writable), which the check
        /// refuses. The root's owner (root or this user) and everything below the root are checked
        /// either way.
        public var checksWayToRoot: Bool

        /// Creates a configuration; every parameter has the documented default.
        public init(
            busyTimeout: Duration = .seconds(5),
            changePollInterval: Duration = .milliseconds(100),
            moveItemsFromPreviousGroup: Bool = false,
            changeLogRetention: Int = 10_000,
            checksWayToRoot: Bool = true
        ) {
            self.busyTimeout = busyTimeout
            self.changePollInterval = changePollInterval
            self.moveItemsFromPreviousGroup = moveItemsFromPreviousGroup
            self.changeLogRetention = changeLogRetention
            self.checksWayToRoot = checksWayToRoot
        }

        /// Throws ``KeystoreError/Code/invalidConfiguration`` for a value no keystore can work
        /// with: a negative busy timeout, a change-poll interval that is not positive (the
        /// feed would poll without pause), a negative change-log retention.
        func check() throws(KeystoreError) {
            var problems: [String] = []
            if busyTimeout < .zero { problems.append("busyTimeout is negative (\(busyTimeout))") }
            if changePollInterval <= .zero { problems.append("changePollInterval is not positive (\(changePollInterval))") }
            if changeLogRetention < 0 { problems.append("changeLogRetention is negative (\(changeLogRetention))") }
            guard problems.isEmpty else {
                throw KeystoreError(.invalidConfiguration, "SQLiteKeystore.Configuration: " + problems.joined(separator: "; "))
            }
        }
    }
}
