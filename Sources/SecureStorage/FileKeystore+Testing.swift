public import Logging

/// A test hook called at migration checkpoints: `("copied", n)` after the n-th item is
/// written to the target, `("committed", count)` once the journal enters its delete phase,
/// `("deleted", n)` after the n-th source item is deleted. Throwing (or killing the process)
/// simulates a crash at that point.
@_spi(Testing)
public typealias MigrationCheckpoint = @Sendable (_ stage: String, _ count: Int) throws -> Void

extension FileKeystore {
    /// ``migrate(root:service:from:to:keySource:lockTimeout:logger:)`` with a crash-simulation
    /// hook, for tests only.
    @_spi(Testing)
    @discardableResult
    public static func _migrate(
        root: String,
        service: String,
        from source: AccessGroup,
        to target: AccessGroup,
        keySource: KeySource = .keyFile,
        logger: Logger? = nil,
        checkpoint: @escaping MigrationCheckpoint
    ) throws -> Int {
        try migrate(root: root, service: service, from: source, to: target, keySource: keySource,
                    lockTimeout: defaultLockTimeout, logger: logger, checkpoint: checkpoint)
    }
}
