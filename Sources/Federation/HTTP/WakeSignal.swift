import CCurlLoader

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The driver loop's wake-up: an `eventfd` (Linux) that `curl_multi_poll` watches as an
/// extra descriptor. Where there is none (`ib_eventfd` returns -1), the driver falls back to
/// `curl_multi_wakeup`.
///
/// `eventfd(2)` comes through the C shim (`ib_eventfd` in CCurlLoader) because the Glibc
/// module does not import `<sys/eventfd.h>`; declared in C, it is resolved by the linker
/// like any libc function rather than looked up at run time.
enum WakeSignal {
    /// A non-blocking, close-on-exec `eventfd`, or `nil`.
    static func make() -> Int32? {
        let fd = ib_eventfd(0, IB_EFD_CLOEXEC | IB_EFD_NONBLOCK)
        return fd >= 0 ? fd : nil
    }

    /// Adds 1 to the counter, making the descriptor readable. A full counter (EAGAIN) is
    /// readable already.
    static func signal(_ fd: Int32) {
        var one: UInt64 = 1
        while write(fd, &one, 8) < 0 && errno == EINTR {}
    }

    /// Resets the counter to 0.
    static func drain(_ fd: Int32) {
        var value: UInt64 = 0
        while read(fd, &value, 8) < 0 && errno == EINTR {}
    }
}
