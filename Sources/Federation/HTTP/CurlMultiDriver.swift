internal import CCurlLoader
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
/// system call, and an `eventfd` write is short enough that the woken loop does not find
/// the mailbox lock still held by the thread that woke it. The loop creates the `eventfd`
/// with the multi handle and closes it with the multi handle.
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

    init(maxCachedConnections: Int, maxConnectionsPerHost: Int) {
        self.maxCachedConnections = max(1, maxCachedConnections)
        self.maxConnectionsPerHost = max(0, maxConnectionsPerHost)
    }

    /// A fresh transfer id; never 0, because the id doubles as `CURLOPT_PRIVATE`.
    func makeTransferID() -> UInt64 {
        let id = nextTransferID.wrappingAdd(1, ordering: .relaxed).oldValue
        return id != 0 ? id : nextTransferID.wrappingAdd(1, ordering: .relaxed).oldValue
    }

    /// Wakes the loop for work just queued, with the lock held (the wake-up descriptor and
    /// the multi handle are freed only after the mailbox says `.stopped`): nothing when the
    /// loop is not going to sleep (it looks at the mailbox again first), else the `eventfd`,
    /// or `curl_multi_wakeup` where there is none.
    private func wake(_ box: inout Mailbox, multi: MultiHandle) {
        guard box.loopSleeping else { return }
        box.loopSleeping = false
        if let wakeFD = multi.wakeFD {
            WakeSignal.signal(wakeFD)
        } else {
            _ = ib_curl_multi_wakeup(multi.raw)
        }
    }

    /// Hands `transfer` to the driver thread, starting the thread on first use.
    func submit(_ transfer: CurlTransfer) {
        let failure: TransportError? = mailbox.withLock { box in
            if case .idle = box.lifecycle, let error = startThread(&box) {
                return error
            }
            guard case .running(let multi) = box.lifecycle else {
                return TransportError(kind: .other, message: "the HTTP transport was shut down")
            }
            box.pending.append(transfer)
            wake(&box, multi: multi)
            return nil
        }
        if let failure { transfer.finish(.failure(failure)) }
    }

    /// Asks the driver thread to remove transfer `id` from the multi handle at once.
    /// The caller has already resumed the waiting task; this only frees the connection.
    func cancel(transferID id: UInt64) {
        mailbox.withLock { box in
            guard case .running(let multi) = box.lifecycle else { return }
            box.cancelled.append(id)
            wake(&box, multi: multi)
        }
    }

    /// Stops the driver thread and waits for it to exit. Transfers still in flight fail
    /// with ``TransportError/Kind/other``; idle connections are closed.
    func shutdown() {
        let thread: pthread_t? = mailbox.withLock { box in
            switch box.lifecycle {
            case .idle:
                box.lifecycle = .stopped
            case .running(let multi):
                box.stopRequested = true
                wake(&box, multi: multi)
            case .stopped:
                break
            }
            defer { box.thread = nil }
            return box.thread
        }
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
    fileprivate func takeWork() -> Work {
        mailbox.withLock { box in
            box.loopSleeping = false
            if box.pending.isEmpty && box.cancelled.isEmpty && !box.stopRequested {
                return Work(pending: [], cancelled: [], stop: false)
            }
            let work = Work(pending: box.pending, cancelled: box.cancelled, stop: box.stopRequested)
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
    fileprivate func prepareToSleep() -> Bool {
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
            if let wakeFD = start.multi.wakeFD { close(wakeFD) }
            return nil
        }, start.toOpaque())
        guard rc == 0 else {
            start.release()
            ib_curl_multi_cleanup(multi)
            if let wakeFD = handle.wakeFD { close(wakeFD) }
            return TransportError(kind: .other, message: "could not start the HTTP driver thread (errno \(rc))")
        }
        box.thread = thread
        box.lifecycle = .running(handle)
        return nil
    }
}

/// The wake-up `eventfd` (Linux). `eventfd(2)` is looked up at run time because the Glibc
/// module does not import `<sys/eventfd.h>`; without it the driver uses `curl_multi_wakeup`.
enum WakeSignal {
    private typealias EventFD = @convention(c) (UInt32, Int32) -> Int32

    /// A non-blocking, close-on-exec `eventfd`, or `nil`.
    static func make() -> Int32? {
        #if os(Linux)
        guard let symbol = dlsym(nil, "eventfd") else { return nil }
        let eventfd = unsafeBitCast(symbol, to: EventFD.self)
        // EFD_CLOEXEC and EFD_NONBLOCK equal O_CLOEXEC and O_NONBLOCK.
        let fd = eventfd(0, Int32(O_CLOEXEC | O_NONBLOCK))
        return fd >= 0 ? fd : nil
        #else
        return nil
        #endif
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

/// What the driver thread picks up from the mailbox in one go.
private struct Work {
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
    /// The loop's wake-up `eventfd` (see ``WakeSignal``), written under the mailbox lock
    /// while `.running` and closed by the loop thread with the multi handle; `nil` where
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

/// The loop on the driver thread: add new transfers, drop cancelled ones, let libcurl
/// work, complete finished transfers, then sleep in `curl_multi_poll` until a socket is
/// ready, a libcurl timer fires or another thread calls `curl_multi_wakeup`.
///
/// Not `Sendable`: it owns the easy handles and lives and dies on the driver thread.
private final class CurlMultiLoop {
    private let driver: CurlMultiDriver
    private let multi: UnsafeMutableRawPointer
    private let wakeFD: Int32?
    private var active: [UInt64: (handle: CurlEasyHandle, transfer: CurlTransfer)] = [:]

    init(driver: CurlMultiDriver, multi: UnsafeMutableRawPointer, wakeFD: Int32?) {
        self.driver = driver
        self.multi = multi
        self.wakeFD = wakeFD
    }

    func run() {
        while true {
            let work = driver.takeWork()
            if work.stop {
                stop(failing: work.pending)
                return
            }
            for transfer in work.pending { add(transfer) }
            for id in work.cancelled { remove(id) }

            var running: Int32 = 0
            _ = ib_curl_multi_perform(multi, &running)
            completeFinishedTransfers()
            guard driver.prepareToSleep() else { continue }
            // The timeout only bounds the sleep; libcurl shortens it to its own timers.
            if let wakeFD {
                var extra = curl_waitfd(fd: wakeFD, events: Int16(CURL_WAIT_POLLIN), revents: 0)
                _ = ib_curl_multi_poll(multi, &extra, 1, 1000, nil)
                if extra.revents != 0 { WakeSignal.drain(wakeFD) }
            } else {
                _ = ib_curl_multi_poll(multi, nil, 0, 1000, nil)
            }
        }
    }

    private func add(_ transfer: CurlTransfer) {
        // Cancelled between submission and now: the task has already been resumed.
        guard !transfer.isFinished else { return }
        do {
            let handle = try CurlEasyHandle(id: transfer.id, request: transfer.request)
            let code = ib_curl_multi_add_handle(multi, handle.rawHandle)
            guard code == CURLM_OK else {
                transfer.finish(.failure(TransportError(
                    kind: .other, message: String(cString: ib_curl_multi_strerror(code)))))
                return
            }
            active[transfer.id] = (handle, transfer)
        } catch {
            transfer.finish(.failure(error))
        }
    }

    /// Takes a cancelled transfer out of the multi handle; its connection is closed or
    /// returned to the cache by libcurl. Unknown ids have already completed.
    private func remove(_ id: UInt64) {
        guard let entry = active.removeValue(forKey: id) else { return }
        _ = ib_curl_multi_remove_handle(multi, entry.handle.rawHandle)
        entry.transfer.finish(.failure(CancellationError()))
    }

    private func completeFinishedTransfers() {
        var remaining: Int32 = 0
        while let message = ib_curl_multi_info_read(multi, &remaining) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let code = message.pointee.data.result
            var privateData: UnsafeMutableRawPointer?
            _ = ib_curl_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &privateData)
            let id = UInt64(UInt(bitPattern: privateData))
            guard let entry = active.removeValue(forKey: id) else {
                _ = ib_curl_multi_remove_handle(multi, easy)
                continue
            }
            let result = Self.result(of: entry.handle, code: code)
            _ = ib_curl_multi_remove_handle(multi, easy)
            entry.transfer.finish(result)
        }
    }

    private static func result(of handle: CurlEasyHandle, code: CURLcode) -> Result<HTTPResponse, any Error> {
        guard code == CURLE_OK else {
            return .failure(TransportError(
                curlCode: code, exceededCap: handle.exceededCap, cap: handle.maxResponseBytes))
        }
        let status = handle.responseCode
        return .success(HTTPResponse(
            status: status != 0 ? status : (handle.statusFromHeaders ?? 0),
            headers: handle.responseHeaders,
            body: handle.responseBody))
    }

    private func stop(failing pending: [CurlTransfer]) {
        let error = TransportError(kind: .other, message: "the HTTP transport was shut down")
        for transfer in pending { transfer.finish(.failure(error)) }
        for (_, entry) in active {
            _ = ib_curl_multi_remove_handle(multi, entry.handle.rawHandle)
            entry.transfer.finish(.failure(error))
        }
        active.removeAll()
    }
}

extension TransportError {
    /// Maps a failed transfer's `CURLcode` to a kind, keeping the code and libcurl's
    /// generic text for it. Never the error buffer: its text may quote the URL.
    init(curlCode code: CURLcode, exceededCap: Bool, cap: Int) {
        let kind: Kind
        switch code {
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY, CURLE_PROXY:
            kind = .connectFailed
        case CURLE_OPERATION_TIMEDOUT:
            kind = .timedOut
        case CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE,
             CURLE_HTTP2, CURLE_HTTP2_STREAM:
            kind = .connectionLost
        case CURLE_FILESIZE_EXCEEDED:
            kind = .responseTooLarge
        case CURLE_WRITE_ERROR where exceededCap:
            kind = .responseTooLarge
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM,
             CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ENGINE_NOTFOUND,
             CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_ENGINE_INITFAILED, CURLE_SSL_SHUTDOWN_FAILED,
             CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH,
             CURLE_SSL_INVALIDCERTSTATUS, CURLE_USE_SSL_FAILED:
            kind = .tlsFailed
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL, CURLE_BAD_FUNCTION_ARGUMENT:
            kind = .invalidRequest
        default:
            kind = .other
        }
        var message = String(cString: ib_curl_easy_strerror(code))
        if kind == .responseTooLarge {
            message = "response body exceeds the \(cap)-byte limit: " + message
        }
        self.init(kind: kind, curlCode: Int32(bitPattern: code.rawValue), message: message)
    }
}

/// One request on its way through the driver, shared by the calling task, its
/// cancellation handler and the driver thread.
///
/// Whoever gets here first decides the outcome: completion by the driver, or
/// cancellation, which resumes the caller at once with `CancellationError` instead of
/// waiting for the driver to notice. The continuation is therefore resumed exactly once
/// even when cancellation races submission or completion.
final class CurlTransfer: Sendable {
    let id: UInt64
    let request: HTTPRequest
    private let phase = Mutex(Phase.created)

    private enum Phase {
        /// The continuation has not been installed yet.
        case created
        /// The caller is suspended on this continuation.
        case waiting(CheckedContinuation<HTTPResponse, any Error>)
        /// Completed or cancelled; later outcomes are dropped.
        case finished
    }

    init(id: UInt64, request: HTTPRequest) {
        self.id = id
        self.request = request
    }

    /// Whether the outcome is already decided (the driver then skips or drops it).
    var isFinished: Bool {
        phase.withLock { if case .finished = $0 { true } else { false } }
    }

    /// Installs the caller's continuation. Returns `false` (after resuming it with
    /// `CancellationError`) when the task was cancelled before it got here, in which
    /// case the transfer must not be submitted.
    func install(_ continuation: CheckedContinuation<HTTPResponse, any Error>) -> Bool {
        let cancelledEarly: Bool = phase.withLock { phase in
            guard case .created = phase else { return true }
            phase = .waiting(continuation)
            return false
        }
        if cancelledEarly { continuation.resume(throwing: CancellationError()) }
        return !cancelledEarly
    }

    /// Resumes the caller with `CancellationError` now. Returns `true` when the transfer
    /// may be inside the multi handle and the driver should remove it.
    func cancel() -> Bool {
        let continuation: CheckedContinuation<HTTPResponse, any Error>?? = phase.withLock { phase in
            switch phase {
            case .created:
                phase = .finished
                return .some(nil)
            case .waiting(let continuation):
                phase = .finished
                return .some(continuation)
            case .finished:
                return nil
            }
        }
        guard let continuation else { return false }
        continuation?.resume(throwing: CancellationError())
        return continuation != nil
    }

    /// Resumes the caller with `result` unless the outcome was already decided.
    func finish(_ result: Result<HTTPResponse, any Error>) {
        let continuation: CheckedContinuation<HTTPResponse, any Error>? = phase.withLock { phase in
            guard case .waiting(let continuation) = phase else {
                phase = .finished
                return nil
            }
            phase = .finished
            return continuation
        }
        continuation?.resume(with: result)
    }
}
