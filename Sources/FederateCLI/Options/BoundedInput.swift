import Federation
import SecureStorage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads what the user points the CLI at (`--token-file`, `--policy-file`, standard input)
/// up to a cap, without hanging on a FIFO nobody writes to.
///
/// A named file is opened non-blocking (opening a FIFO with no writer would block) and read
/// as data arrives, for at most ``fileWait``; a pipe such as `<(…)` delivers at once.
/// Standard input (never a terminal: the caller refuses one) is read for at most
/// ``standardInputWait`` unless the caller gives another wait: a pipe whose writer never
/// closes it (a command that keeps running, an inherited pipe nobody writes) would otherwise
/// hold the command forever. The buffers it reads through are wiped.
enum BoundedInput {
    /// How long a named file may take to deliver its data to the end (a FIFO's writer).
    static let fileWait: Duration = .seconds(10)
    /// How long standard input may take to deliver its data to the end by default: longer
    /// than a file's, since the command piping the token in may first fetch it over the
    /// network or ask its user for a passphrase (`gpg -d`, a password manager).
    static let standardInputWait: Duration = .seconds(120)

    enum Failure: Error {
        case open(Int32)
        case read(Int32)
        /// Not at its end within this long.
        case timedOut(Duration)
    }

    /// The bytes of `path`, read to its end or until past `limit`.
    static func readFile(_ path: String, limit: Int) throws(Failure) -> [UInt8] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { throw .open(errno) }
        defer { close(descriptor) }
        return try readOpenedFile(descriptor, limit: limit)
    }

    /// The bytes of a file the caller opened non-blocking (and checked), as ``readFile(_:limit:)``
    /// reads them.
    static func readOpenedFile(_ descriptor: Int32, limit: Int) throws(Failure) -> [UInt8] {
        try readToEnd(descriptor, limit: limit, wait: fileWait)
    }

    /// The bytes of standard input, read to its end or until past `limit`, for at most
    /// `wait` (`nil`: as long as it takes).
    static func readStandardInput(limit: Int, wait: Duration?) throws(Failure) -> [UInt8] {
        try readToEnd(STDIN_FILENO, limit: limit, wait: wait)
    }

    private static func readToEnd(_ descriptor: Int32, limit: Int, wait: Duration?) throws(Failure) -> [UInt8] {
        // No limit: a deadline no wait reaches (poll takes at most Int32.max milliseconds a call).
        let deadline = ContinuousClock.now.advanced(by: wait ?? .seconds(Int64(Int32.max)))
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        defer { CryptoRuntime.cleanse(&chunk) }
        // Past the cap the caller refuses the input: an endless pipe must not exhaust memory.
        while bytes.count <= limit {
            let remaining = ContinuousClock.now.duration(to: deadline)
            guard remaining > .zero else {
                CryptoRuntime.cleanse(&bytes)
                throw .timedOut(wait ?? .zero)
            }
            // Readable, or its writer gone: then a read returns what is left, or 0. Polling
            // first also keeps a blocking descriptor (standard input) from blocking the read.
            var request = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(clamping: remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1)
            let ready = poll(&request, 1, milliseconds)
            if ready < 0 && errno != EINTR {
                let code = errno
                CryptoRuntime.cleanse(&bytes)
                throw .read(code)
            }
            if ready <= 0 { continue }
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                let code = errno
                CryptoRuntime.cleanse(&bytes)
                throw .read(code)
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        return bytes
    }

    /// The failure in words, for `source` (`token file 'PATH'`, say).
    static func describe(_ failure: Failure, source: String) -> String {
        switch failure {
        case .open(let code): "cannot open \(source): \(String(cString: strerror(code)))"
        case .read(let code): "cannot read \(source): \(String(cString: strerror(code)))"
        case .timedOut(let wait): "nothing finished writing \(source) within \(wait.components.seconds) seconds (a FIFO or pipe needs a writer that closes it)"
        }
    }
}
