import CCurlLoader
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Owns one libcurl multi handle and the one thread that drives it.
///
/// Every request of a ``CurlTransport`` runs as an easy handle inside this one multi
/// handle, so connections (and TLS sessions) are reused across requests and any number
/// of concurrent requests cost one thread, not one each. The thread is the serial
/// executor for everything libcurl: easy handles are created, driven and destroyed only
/// there. Other threads talk to it through a `Mutex`-protected mailbox (new transfers,
/// cancellations, a stop request) and a wake-up signal.
///
/// The wake-up is cheap on purpose, since it happens once per request: an `eventfd` the
/// loop passes to `curl_multi_poll` as an extra descriptor (where there is no `eventfd`,
/// `curl_multi_wakeup`, the one multi-handle call libcurl allows from another thread). It is
/// sent only when the loop has said it is about to sleep, so a busy loop costs submitters no
/// system call, and it is written after the mailbox lock is released: a loop woken on an idle
/// CPU used to find the lock still held by its waker, inside the `write`, and spun on it
/// (~14 µs of CPU per federation at concurrency 1 when each one also waited for an fsync).
/// The `eventfd` is created with the multi handle and closed only when the driver is
/// deinitialised, so a write that comes after the loop has stopped reaches a descriptor
/// that is still this one.
///
/// The thread starts lazily on the first request and ends on ``shutdown()``; a driver
/// that has been shut down fails later requests rather than starting a second thread.
final class CurlMultiDriver: Sendable {
    /// `CURLMOPT_MAXCONNECTS`: idle connections kept for reuse.
    let maxCachedConnections: Int
    /// `CURLMOPT_MAX_HOST_CONNECTIONS`: concurrent connections per host; further
    /// transfers to that host wait inside libcurl for a connection to free up (their
    /// request timeout keeps running while they wait).
    let maxConnectionsPerHost: Int

    private let mailbox = Mutex(Mailbox())
    private let nextTransferID = Atomic<UInt64>(1)
    /// The loop's `eventfd`, or -1 before the thread starts or where there is none; closed in
    /// `deinit`, never earlier (see the type's discussion).
    private let wakeDescriptor = Atomic<Int32>(-1)

    init(maxCachedConnections: Int, maxConnectionsPerHost: Int) {
        self.maxCachedConnections = max(1, maxCachedConnections)
        self.maxConnectionsPerHost = max(0, maxConnectionsPerHost)
    }

    deinit {
        let fd = wakeDescriptor.load(ordering: .acquiring)
        if fd >= 0 { close(fd) }
    }

    /// A fresh transfer id; never 0, because the id doubles as `CURLOPT_PRIVATE`.
    func makeTransferID() -> UInt64 {
        let id = nextTransferID.wrappingAdd(1, ordering: .relaxed).oldValue
        return id != 0 ? id : nextTransferID.wrappingAdd(1, ordering: .relaxed).oldValue
    }

    /// What waking the loop for work just queued takes, decided with the lock held: nothing
    /// when the loop is not going to sleep (it looks at the mailbox again first); else the
    /// `eventfd` to signal once the lock is released (``WakeSignal/signal(_:)``), or, where
    /// there is none, `curl_multi_wakeup` at once (the multi handle is freed only after the
    /// mailbox says `.stopped`).
    private func wake(_ box: inout Mailbox, multi: MultiHandle) -> Int32? {
        guard box.loopSleeping else { return nil }
        box.loopSleeping = false
        if let wakeFD = multi.wakeFD { return wakeFD }
        _ = ib_curl_multi_wakeup(multi.raw)
        return nil
    }

    /// Hands `transfer` to the driver thread, starting the thread on first use.
    func submit(_ transfer: CurlTransfer) {
        let outcome: Result<Int32?, TransportError> = mailbox.withLock { box in
            if case .idle = box.lifecycle, let error = startThread(&box) {
                return .failure(error)
            }
            guard case .running(let multi) = box.lifecycle else {
                return .failure(TransportError(kind: .other, message: "the HTTP transport was shut down"))
            }
            box.pending.append(transfer)
            return .success(wake(&box, multi: multi))
        }
        switch outcome {
        case .success(let wakeFD?): WakeSignal.signal(wakeFD)
        case .success(nil): break
        case .failure(let failure): transfer.finish(.failure(failure))
        }
    }

    /// Asks the driver thread to remove transfer `id` from the multi handle at once.
    /// The caller has already resumed the waiting task; this only frees the connection.
    func cancel(transferID id: UInt64) {
        let wakeFD: Int32? = mailbox.withLock { box in
            guard case .running(let multi) = box.lifecycle else { return nil }
            box.cancelled.append(id)
            return wake(&box, multi: multi)
        }
        if let wakeFD { WakeSignal.signal(wakeFD) }
    }

    /// Stops the driver thread and waits for it to exit. Transfers still in flight fail
    /// with ``TransportError/Kind/other``; idle connections are closed.
    func shutdown() {
        let (thread, wakeFD): (pthread_t?, Int32?) = mailbox.withLock { box in
            var wakeFD: Int32?
            switch box.lifecycle {
            case .idle:
                box.lifecycle = .stopped
            case .running(let multi):
                box.stopRequested = true
                wakeFD = wake(&box, multi: multi)
            case .stopped:
                break
            }
            defer { box.thread = nil }
            return (box.thread, wakeFD)
        }
        if let wakeFD { WakeSignal.signal(wakeFD) }
        guard let thread else { return }
        if pthread_equal(thread, pthread_self()) != 0 {
            // Never join ourselves; the loop is already on its way out.
            pthread_detach(thread)
        } else {
            pthread_join(thread, nil)
        }
    }

    // MARK: Driver-thread side

    /// Takes everything other threads queued since the last call. When a stop was
    /// requested, the lifecycle becomes `.stopped` here, under the lock, so no other
    /// thread calls `curl_multi_wakeup` on a multi handle that is about to be freed.
    func takeWork() -> DriverWork {
        mailbox.withLock { box in
            box.loopSleeping = false
            if box.pending.isEmpty && box.cancelled.isEmpty && !box.stopRequested {
                return DriverWork(pending: [], cancelled: [], stop: false)
            }
            let work = DriverWork(pending: box.pending, cancelled: box.cancelled, stop: box.stopRequested)
            box.pending.removeAll(keepingCapacity: true)
            box.cancelled.removeAll()
            if box.stopRequested {
                box.stopRequested = false
                box.lifecycle = .stopped
            }
            return work
        }
    }

    /// Called by the loop just before it sleeps in `curl_multi_poll`: returns `false` (do not
    /// sleep) when work arrived since ``takeWork()``; otherwise records that the loop sleeps,
    /// so the next submission wakes it.
    func prepareToSleep() -> Bool {
        mailbox.withLock { box in
            guard box.pending.isEmpty && box.cancelled.isEmpty && !box.stopRequested else { return false }
            box.loopSleeping = true
            return true
        }
    }

    /// Creates the multi handle and the driver thread; called with the lock held.
    /// Returns the error when either cannot be created.
    private func startThread(_ box: inout Mailbox) -> TransportError? {
        if let loadError = LibraryBootstrap.ensure() {
            return TransportError(kind: .other, message: loadError)
        }
        guard let multi = ib_curl_multi_init() else {
            return TransportError(kind: .other, message: "curl_multi_init failed")
        }
        _ = ib_curl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, maxCachedConnections)
        _ = ib_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, maxConnectionsPerHost)

        let handle = MultiHandle(raw: multi, wakeFD: WakeSignal.make())
        let start = Unmanaged.passRetained(ThreadStart(driver: self, multi: handle))
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { argument in
            let start = Unmanaged<ThreadStart>.fromOpaque(argument!).takeRetainedValue()
            // With CURLOPT_NOSIGNAL libcurl does not ignore SIGPIPE itself, and a TLS
            // write to a peer that hung up would raise it and kill the process. Blocked
            // on this thread, the write fails with EPIPE instead and libcurl reports it.
            var signals = sigset_t()
            sigemptyset(&signals)
            sigaddset(&signals, SIGPIPE)
            pthread_sigmask(SIG_BLOCK, &signals, nil)
            CurlMultiLoop(driver: start.driver, multi: start.multi.raw, wakeFD: start.multi.wakeFD).run()
            ib_curl_multi_cleanup(start.multi.raw)
            return nil
        }, start.toOpaque())
        guard rc == 0 else {
            start.release()
            ib_curl_multi_cleanup(multi)
            if let wakeFD = handle.wakeFD { close(wakeFD) }
            return TransportError(kind: .other, message: "could not start the HTTP driver thread (errno \(rc))")
        }
        if let wakeFD = handle.wakeFD { wakeDescriptor.store(wakeFD, ordering: .releasing) }
        box.thread = thread
        box.lifecycle = .running(handle)
        return nil
    }
}

/// What the driver thread picks up from the mailbox in one go.
struct DriverWork {
    var pending: [CurlTransfer]
    var cancelled: [UInt64]
    var stop: Bool
}

/// The state other threads share with the driver thread, guarded by the mutex.
private struct Mailbox: Sendable {
    enum Lifecycle: Sendable {
        case idle
        case running(MultiHandle)
        case stopped
    }

    var lifecycle = Lifecycle.idle
    var thread: pthread_t?
    var stopRequested = false
    /// Set by the loop just before it sleeps; whoever queues work next clears it and wakes
    /// the loop.
    var loopSleeping = false
    var pending: [CurlTransfer] = []
    var cancelled: [UInt64] = []
}

/// A `CURLM *` that may cross threads.
///
/// `@unchecked` because the only use from other threads is `curl_multi_wakeup`, which
/// libcurl documents as thread-safe, and only while the mailbox says `.running` (the
/// driver thread frees the handle only after switching the mailbox to `.stopped`).
private struct MultiHandle: @unchecked Sendable {
    let raw: UnsafeMutableRawPointer
    /// The loop's wake-up `eventfd` (see ``WakeSignal``), written by whoever queued work after
    /// releasing the mailbox lock, and closed when the driver is deinitialised; `nil` where
    /// there is none.
    let wakeFD: Int32?
}

/// What the new thread needs, passed through `pthread_create`'s context pointer.
private final class ThreadStart: Sendable {
    let driver: CurlMultiDriver
    let multi: MultiHandle

    init(driver: CurlMultiDriver, multi: MultiHandle) {
        self.driver = driver
        self.multi = multi
    }
}
