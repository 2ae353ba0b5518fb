import CProcessSpawn
import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A command `federate exec` runs, started by ``ib_spawn_bound`` (PATH lookup as a shell
/// does) with a clean signal state: an empty blocked-signal mask and every catchable
/// signal at its default disposition, except those `federate` was started with ignored
/// (``InheritedSignals``: `nohup`'s SIGHUP), which stay ignored. Without that, a child
/// started from a Swift concurrency thread inherits a mask that blocks SIGTERM, and signals
/// `federate` traps or ignores (SIGINT, SIGTERM, SIGPIPE) would stay ignored in the child. It also starts
/// with only standard input, output and error open, plus what `federate` itself inherited
/// (``InheritedDescriptors``), and nothing `federate` opened: SwiftNIO opens its listening socket and
/// epoll descriptors without close-on-exec, and a PostgreSQL keystore's pool holds logged-in
/// connections. A command that inherited them could speak SQL as the broker, or keep the
/// credential port bound after `federate` exits. On Linux it dies with `federate`: a command
/// left running after `federate` was killed would ask the endpoint's port for its next
/// credentials, and once the port is free any local user could listen there and answer.
struct ChildProcess: Sendable {
    /// The child's process ID.
    let pid: pid_t

    /// Why a command could not be started.
    struct SpawnFailure: Error {
        /// `errno` from the lookup, `execve`, or preparing the start.
        var code: Int32
        /// Whether it came from the lookup or `execve` (the command cannot be run), rather
        /// than from preparing the start (memory, descriptors, a process limit).
        var whileRunning: Bool
    }

    /// Starts `arguments[0]` with `arguments` and `environment` (`NAME=VALUE` entries), with
    /// standard input, output and error and the descriptors in `keeping` open, and no other;
    /// the signals in `ignoring` stay ignored, every other one is at its default.
    /// `whenForked` is called as soon as the child exists, before it runs the command.
    ///
    /// Both are bytes, passed on unchanged: neither need be UTF-8 (``RawArguments``).
    static func spawn(
        _ arguments: [[UInt8]], environment: [[UInt8]], keeping: [Int32], ignoring: Set<Int32> = [],
        whenForked: (@convention(c) () -> Void)? = nil
    ) throws(SpawnFailure) -> ChildProcess {
        // An inherited `SIGCHLD = SIG_IGN` would have the kernel reap the child itself: no
        // exit status, and its process ID free for reuse while signals are still forwarded.
        signal(SIGCHLD, SIG_DFL)

        let argv = arguments.map(Self.cString) + [nil]
        let envp = environment.map(Self.cString) + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp {
                // Entries hold the authorization token: wipe before freeing.
                if let pointer { memset(pointer, 0, strlen(pointer)) }
                free(pointer)
            }
        }
        guard let path = argv[0], !(argv.dropLast() + envp.dropLast()).contains(nil) else {
            throw SpawnFailure(code: ENOMEM, whileRunning: false)
        }
        var pid = pid_t()
        var stage = Int32(IB_SPAWN_PREPARING)
        let ignored = Array(ignoring)
        let code = ib_spawn_bound(&pid, &stage, path, argv, envp, keeping, Int32(keeping.count), ignored, Int32(ignored.count), whenForked)
        guard code == 0 else { throw SpawnFailure(code: code, whileRunning: stage == Int32(IB_SPAWN_RUNNING)) }
        return ChildProcess(pid: pid)
    }

    /// A `malloc`ed, NUL-terminated copy of `bytes` (which hold no NUL: they came from one).
    private static func cString(_ bytes: [UInt8]) -> UnsafeMutablePointer<CChar>? {
        guard let copy = malloc(bytes.count + 1)?.assumingMemoryBound(to: CChar.self) else { return nil }
        bytes.withUnsafeBytes { source in
            UnsafeMutableRawPointer(copy).copyMemory(from: source.baseAddress ?? UnsafeRawPointer(copy), byteCount: source.count)
        }
        copy[bytes.count] = 0
        return copy
    }

    /// Sends `signal` to the child. Only before ``reap()``: until then its process ID cannot
    /// belong to another process, even once it has ended.
    func send(_ signal: Int32) {
        _ = kill(pid, signal)
    }

    /// Waits for the child to end without reaping it, on a thread of its own (never a Swift
    /// concurrency thread), so that its process ID stays its own until ``reap()``.
    func waitForExit() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue(label: "federate.exec.wait").async {
                var info = siginfo_t()
                while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
                continuation.resume()
            }
        }
    }

    /// Reaps the ended child and returns the exit code the shell would report: its status,
    /// or 128 + the signal that killed it.
    func reap() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR { return 1 }
        }
        return Self.shellCode(waitStatus: status)
    }

    /// `WEXITSTATUS` for a normal exit, 128 + `WTERMSIG` for a signal (the macros are
    /// not visible from Swift).
    static func shellCode(waitStatus status: Int32) -> Int32 {
        let signal = status & 0x7F
        if signal == 0 { return (status >> 8) & 0xFF }
        return 128 + signal
    }
}
