import CCurlLoader
import Synchronization

/// Idle libcurl easy handles of one driver loop, kept for the next transfers.
///
/// `curl_easy_init` allocates and zeroes libcurl's per-handle state (about 5.6 KB on
/// libcurl 7.88) and `curl_easy_cleanup` frees it again; at concurrency 1 that pair, twice
/// per federation, showed in the driver thread's profile together with glibc's
/// `malloc_consolidate` (docs/performance.md, §3a and §3c). A handle that finished a
/// transfer (completed, failed or cancelled) is put back with `curl_easy_reset`, which
/// returns every option to its default (URL, method, body pointer, headers, callbacks and
/// their user data), so no option of one request reaches the next. What a reset keeps is
/// state the transport either never turns on (cookies, HSTS, alt-svc) or wants kept: on
/// libcurl before 8.12 the TLS session cache lives in the easy handle, so a pooled handle
/// can resume a TLS session with the same host, port and TLS settings (peer verification
/// stays on), as every handle does on 8.12 and later, where that cache is the multi
/// handle's. Connections and the DNS cache are the multi handle's either way. libcurl's
/// receive buffer is still allocated for each transfer.
///
/// At most ``capacity`` idle handles are kept; more are freed. Not `Sendable`: like the
/// handles themselves it belongs to the driver thread.
package final class CurlEasyHandlePool {
    /// Idle handles kept at most. A loop takes back about as many handles per pass as
    /// transfers finished in that pass, so a few dozen cover the passes of a busy loop
    /// without holding much memory once it goes quiet (a handle and, over TLS, up to five
    /// cached TLS sessions each).
    package static let defaultCapacity = 32

    /// Easy handles every pool of the process has made with `curl_easy_init` so far; tests
    /// read it to check that sequential transfers reuse one handle.
    package static var handlesCreated: Int { created.load(ordering: .relaxed) }
    private static let created = Atomic<Int>(0)

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
        if let handle = idle.popLast() { return handle }
        Self.created.add(1, ordering: .relaxed)
        return ib_curl_easy_init()
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
