extension KeystoreLayout: KeyFileLocation {
    /// Creators serialise on the group directory's lock (the namespace lock of a private
    /// group), which also keeps the temporary-file sweep away from a file being created.
    func createKeyFile(_ bytes: [UInt8], at path: String, group: AccessGroup) throws -> Bool {
        let directory = groupDirectory(group)
        let mode = KeystoreLayout.fileMode(shared: group.isShared)
        let lock = NamespaceLock(path: directory + "/.lock", mode: mode, timeout: FileKeystore.defaultLockTimeout)
        return try lock.withLock { () throws -> Bool in
            guard try POSIX.status(path) == nil else { return false }
            return try POSIX.createExclusively(bytes, at: path, directory: directory, mode: mode)
        }
    }
}
