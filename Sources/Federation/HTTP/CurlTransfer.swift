import Synchronization

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
