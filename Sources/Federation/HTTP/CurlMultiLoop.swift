import CCurlLoader
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The loop on the driver thread: add new transfers, drop cancelled ones, let libcurl
/// work, complete finished transfers, then sleep in `curl_multi_poll` until a socket is
/// ready, a libcurl timer fires or another thread calls `curl_multi_wakeup`. At light load
/// it may poll for a moment before sleeping (``BusyPollPolicy``).
///
/// Not `Sendable`: it owns the easy handles and lives and dies on the driver thread.
final class CurlMultiLoop {
    private let driver: CurlMultiDriver
    private let multi: UnsafeMutableRawPointer
    private let wakeFD: Int32?
    private var active: [UInt64: (handle: CurlEasyHandle, transfer: CurlTransfer)] = [:]
    private let easyHandles = CurlEasyHandlePool()

    init(driver: CurlMultiDriver, multi: UnsafeMutableRawPointer, wakeFD: Int32?) {
        self.driver = driver
        self.multi = multi
        self.wakeFD = wakeFD
    }

    func run() {
        var busyPoll = BusyPollPolicy()
        var holdsPollingToken = false
        defer { if holdsPollingToken { Self.releasePollingToken() } }
        while true {
            let work = driver.takeWork()
            if work.stop {
                stop(failing: work.pending)
                return
            }
            // Cancelled transfers leave first, so their handles serve the new ones.
            for id in work.cancelled { remove(id) }
            for transfer in work.pending { add(transfer) }

            var running: Int32 = 0
            _ = ib_curl_multi_perform(multi, &running)
            let completed = completeFinishedTransfers()
            let progressed = !work.pending.isEmpty || completed > 0
            let wantsToPoll = busyPoll.keepPolling(now: .now, inFlight: active.count, progressed: progressed)
            if wantsToPoll && (holdsPollingToken || Self.takePollingToken()) {
                holdsPollingToken = true
                // Awake, so nobody signals the eventfd; sockets are checked without waiting.
                // Yielding first lets a thread waiting for this CPU run (a database client's
                // event loop, say): polling should only fill idle time (PostgreSQL
                // federations at concurrency 1 were 8 % slower without it).
                sched_yield()
                self.poll(timeoutMilliseconds: 0)
                continue
            }
            if holdsPollingToken {
                Self.releasePollingToken()
                holdsPollingToken = false
            }
            guard driver.prepareToSleep() else { continue }
            // The timeout only bounds the sleep; libcurl shortens it to its own timers.
            self.poll(timeoutMilliseconds: 1000)
        }
    }

    /// How many driver loops of this process are polling rather than sleeping: at most one,
    /// so that many clients, each with its own transport, hold one CPU at most between them.
    private static let pollingDrivers = Atomic<Int>(0)

    private static func takePollingToken() -> Bool {
        pollingDrivers.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged
    }

    private static func releasePollingToken() {
        pollingDrivers.store(0, ordering: .releasing)
    }

    /// `curl_multi_poll` on the transfers' sockets and the wake-up `eventfd`, draining the
    /// latter when it fired.
    private func poll(timeoutMilliseconds timeout: Int32) {
        if let wakeFD {
            var extra = curl_waitfd(fd: wakeFD, events: Int16(CURL_WAIT_POLLIN), revents: 0)
            _ = ib_curl_multi_poll(multi, &extra, 1, timeout, nil)
            if extra.revents != 0 { WakeSignal.drain(wakeFD) }
        } else {
            _ = ib_curl_multi_poll(multi, nil, 0, timeout, nil)
        }
    }

    private func add(_ transfer: CurlTransfer) {
        // Cancelled between submission and now: the task has already been resumed.
        guard !transfer.isFinished else { return }
        do {
            let handle = try CurlEasyHandle(id: transfer.id, request: transfer.request, pool: easyHandles)
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
        guard let entry = active[id] else { return }
        // Out of the multi handle while `active` still holds the handle object (see
        // `completeFinishedTransfers`).
        _ = ib_curl_multi_remove_handle(multi, entry.handle.rawHandle)
        active[id] = nil
        entry.transfer.finish(.failure(CancellationError()))
    }

    /// Hands every finished transfer its result; returns how many there were.
    private func completeFinishedTransfers() -> Int {
        var completed = 0
        var remaining: Int32 = 0
        while let message = ib_curl_multi_info_read(multi, &remaining) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let code = message.pointee.data.result
            var privateData: UnsafeMutableRawPointer?
            _ = ib_curl_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &privateData)
            let id = UInt64(UInt(bitPattern: privateData))
            // Out of the multi handle before the entry (and so the handle object) can go:
            // the handle's `deinit` resets it for reuse, which only a detached handle allows.
            _ = ib_curl_multi_remove_handle(multi, easy)
            guard let entry = active.removeValue(forKey: id) else { continue }
            entry.transfer.finish(Self.result(of: entry.handle, code: code))
            completed += 1
        }
        return completed
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
