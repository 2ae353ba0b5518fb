import CCurlLoader

/// Idle libcurl easy handles of one driver loop, kept for the next transfers.
///
/// `curl_easy_init` allocates and zeroes libcurl's whole per-transfer state (tens of
/// kilobytes with its buffers) and `curl_easy_cleanup` frees it again; at concurrency 1 that
/// pair, twice per federation, was a visible part of the driver thread's time, and the large
/// `calloc` set off glibc's `malloc_consolidate` (docs/performance.md, §3a and §3c). A handle
/// that finished a transfer is put back with `curl_easy_reset`, which returns every option to
/// its default (URL, method, body pointer, headers, callbacks and their user data), so nothing
/// of one request can reach the next. Live connections stay in the multi handle's cache
/// either way.
///
/// At most ``capacity`` idle handles are kept; more are freed. Not `Sendable`: like the
/// handles themselves it belongs to the driver thread.
package final class CurlEasyHandlePool {
    /// Idle handles kept at most. A loop takes back about as many handles per pass as
    /// transfers finished in that pass, so a few dozen cover the passes of a busy loop
    /// without holding much memory (~25 KB each) once it goes quiet.
    package static let defaultCapacity = 32

    /// The most idle handles this pool keeps.
    package let capacity: Int
    private var idle: [UnsafeMutableRawPointer] = []

    package init(capacity: Int = CurlEasyHandlePool.defaultCapacity) {
        self.capacity = max(0, capacity)
        idle.reserveCapacity(self.capacity)
    }

    deinit {
        for handle in idle { ib_curl_easy_cleanup(handle) }
    }

    /// How many handles are waiting to be reused.
    package var idleCount: Int { idle.count }

    /// An easy handle with every option at its default: an idle one, or a new one; `nil`
    /// only when libcurl cannot allocate one.
    package func take() -> UnsafeMutableRawPointer? {
        idle.popLast() ?? ib_curl_easy_init()
    }

    /// Takes back a handle that is in no multi handle, resetting it, or frees it when the
    /// pool is full.
    package func recycle(_ handle: UnsafeMutableRawPointer) {
        guard idle.count < capacity else {
            ib_curl_easy_cleanup(handle)
            return
        }
        ib_curl_easy_reset(handle)
        idle.append(handle)
    }
}

@available(*, unavailable, message: "easy handles are confined to the curl driver thread")
extension CurlEasyHandlePool: Sendable {}
