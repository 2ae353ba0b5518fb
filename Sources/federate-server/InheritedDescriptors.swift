import CProcessSpawn
import Synchronization

/// The descriptors above standard error that `federate-server` was started with (a `<(…)`
/// pipe, `3>file`, make's jobserver, systemd's `LISTEN_FDS`), recorded before it opens any of
/// its own: `federate exec` passes these on to its command and closes every other one.
enum InheritedDescriptors {
    private static let recorded = Mutex<[Int32]>([])

    /// Records the descriptors open now. Call first thing in `main`.
    static func record() {
        var found = [Int32](repeating: -1, count: 64)
        var count = ib_open_descriptors(&found, Int32(found.count))
        if count > Int32(found.count) {
            found = [Int32](repeating: -1, count: Int(count) + 16)
            count = ib_open_descriptors(&found, Int32(found.count))
        }
        let descriptors = count > 0 ? Array(found.prefix(min(Int(count), found.count))) : []
        recorded.withLock { $0 = descriptors }
    }

    /// What ``record()`` found.
    static var atStart: [Int32] { recorded.withLock { $0 } }
}
