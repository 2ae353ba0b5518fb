import Synchronization

/// Whether a ``CredentialServer`` listens yet, and who waits to know its port.
final class ListeningState: Sendable {
    private enum Phase {
        case idle(waiters: [CheckedContinuation<Int, any Error>])
        case running(waiters: [CheckedContinuation<Int, any Error>])
        case listening(port: Int)
        case stopped
    }

    private let phase = Mutex<Phase>(.idle(waiters: []))

    /// Moves to running; false when the server already ran (or is running).
    func start() -> Bool {
        phase.withLock { phase in
            guard case .idle(let waiters) = phase else { return false }
            phase = .running(waiters: waiters)
            return true
        }
    }

    /// The socket is bound to `port`: wakes every waiter.
    func listening(port: Int) {
        let waiters = phase.withLock { phase -> [CheckedContinuation<Int, any Error>] in
            switch phase {
            case .idle(let waiters), .running(let waiters):
                phase = .listening(port: port)
                return waiters
            case .listening, .stopped:
                return []
            }
        }
        for waiter in waiters { waiter.resume(returning: port) }
    }

    /// The server stopped: waiters get ``CredentialServerError/Code/notRunning``.
    func stopped() {
        let waiters = phase.withLock { phase -> [CheckedContinuation<Int, any Error>] in
            defer { phase = .stopped }
            switch phase {
            case .idle(let waiters), .running(let waiters): return waiters
            case .listening, .stopped: return []
            }
        }
        for waiter in waiters { waiter.resume(throwing: Self.notRunning) }
    }

    /// The bound port, waiting until the server listens.
    func port() async throws(CredentialServerError) -> Int {
        do {
            return try await withCheckedThrowingContinuation { continuation in
                let immediate: Result<Int, any Error>? = phase.withLock { phase in
                    switch phase {
                    case .idle(var waiters):
                        waiters.append(continuation)
                        phase = .idle(waiters: waiters)
                        return nil
                    case .running(var waiters):
                        waiters.append(continuation)
                        phase = .running(waiters: waiters)
                        return nil
                    case .listening(let port):
                        return .success(port)
                    case .stopped:
                        return .failure(Self.notRunning)
                    }
                }
                if let immediate { continuation.resume(with: immediate) }
            }
        } catch {
            throw error as? CredentialServerError ?? Self.notRunning
        }
    }

    /// How many callers wait for the port (for tests).
    var waiting: Int {
        phase.withLock { phase in
            switch phase {
            case .idle(let waiters), .running(let waiters): waiters.count
            case .listening, .stopped: 0
            }
        }
    }

    private static var notRunning: CredentialServerError {
        CredentialServerError(code: .notRunning, message: "the credential server is not running: it stopped, or could not listen")
    }
}
