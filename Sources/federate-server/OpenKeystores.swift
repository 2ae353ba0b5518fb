import PostgresKeystore
import Synchronization

/// The PostgreSQL keystores this process opened: ``closeAll()`` ends their connection pools
/// before the process exits (``FederateServer/closeKeystores()``, and `exec` before it
/// passes on its command's status).
enum OpenKeystores {
    private static let opened = Mutex<[PostgresKeystore]>([])

    static func register(_ keystore: PostgresKeystore) {
        opened.withLock { $0.append(keystore) }
    }

    /// Closes every registered keystore; returns at once when there is none.
    static func closeAll() async {
        let keystores = opened.withLock { list in
            defer { list.removeAll() }
            return list
        }
        for keystore in keystores { await keystore.close() }
    }
}
