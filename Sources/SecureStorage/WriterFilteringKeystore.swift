import Synchronization

/// Package-internal: lets a cache over a ``Keystore`` skip re-reading items it just wrote.
///
/// A ``KeystoreBatch`` may carry a ``KeystoreBatch/writer`` tag, and a keystore conforming to
/// `WriterFilteringKeystore` can hand out a change feed that leaves out the keys whose only
/// writes in a commit came from batches with that tag. Every other change — by another
/// writer sharing this instance, another instance, another process — is delivered as usual,
/// and a key written in one commit by this writer and another is delivered too. Keystores
/// that do not conform are used through ``Keystore/changes()`` unchanged.
package protocol WriterFilteringKeystore: Keystore {
    /// ``Keystore/changes()`` without the changes committed solely by batches tagged `writer`.
    func changes(excludingWriter writer: UInt64) -> AsyncStream<KeystoreChange>
}

extension KeystoreBatch {
    /// A new writer tag, unique in this process.
    package static func makeWriterTag() -> UInt64 {
        WriterTags.next.add(1, ordering: .relaxed).newValue
    }
}

private enum WriterTags {
    static let next = Atomic<UInt64>(0)
}
