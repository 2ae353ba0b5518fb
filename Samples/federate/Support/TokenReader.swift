#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads the provider token from a file or stdin. Trailing line breaks are dropped
/// (`echo "$TOKEN" > file` adds one). Errors name the file, never the content.
enum TokenReader {
    /// The largest token accepted: far above any real ID token or SAML assertion.
    static let maxBytes = 1 << 20

    static func contents(ofFile path: String) throws(CLIFailure) -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw CLIFailure(.usage, "cannot read token file '\(path)': \(describe(errno)); check --token-file")
        }
        defer { close(descriptor) }
        return try readAll(descriptor, source: "token file '\(path)'")
    }

    static func readStandardInput() throws(CLIFailure) -> String {
        try readAll(STDIN_FILENO, source: "standard input")
    }

    private static func readAll(_ descriptor: Int32, source: String) throws(CLIFailure) -> String {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                let code = errno
                wipe(&bytes)
                throw CLIFailure(.usage, "cannot read the token from \(source): \(describe(code))")
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
            if bytes.count > maxBytes {
                wipe(&bytes)
                wipe(&chunk)
                throw CLIFailure(.usage, "the token from \(source) is larger than \(maxBytes) bytes; pass the provider's token only")
            }
        }
        wipe(&chunk)
        while let last = bytes.last, last == UInt8(ascii: "\n") || last == UInt8(ascii: "\r") {
            bytes.removeLast()
        }
        guard !bytes.isEmpty else {
            throw CLIFailure(.usage, "the token from \(source) is empty; pass the provider's token")
        }
        guard let token = String(validating: bytes, as: UTF8.self) else {
            wipe(&bytes)
            throw CLIFailure(.usage, "the token from \(source) is not UTF-8 text; pass the provider's token")
        }
        wipe(&bytes)
        return token
    }

    private static func wipe(_ bytes: inout [UInt8]) {
        for index in bytes.indices { bytes[index] = 0 }
    }

    private static func describe(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}
