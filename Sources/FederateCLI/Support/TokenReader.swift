import Federation
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
        defer { ProviderTokenText.wipe(&chunk) }
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                let code = errno
                ProviderTokenText.wipe(&bytes)
                throw CLIFailure(.usage, "cannot read the token from \(source): \(describe(code))")
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
            // Stop reading once past the cap: an endless pipe must not exhaust memory.
            if bytes.count > ProviderTokenText.maxBytes { break }
        }
        switch ProviderTokenText.decode(&bytes) {
        case .success(let token):
            return token
        case .failure(.tooLarge):
            throw CLIFailure(.usage, "the token from \(source) is larger than \(ProviderTokenText.maxBytes) bytes; pass the provider's token only")
        case .failure(.empty):
            throw CLIFailure(.usage, "the token from \(source) is empty; pass the provider's token")
        case .failure(.notUTF8):
            throw CLIFailure(.usage, "the token from \(source) is not UTF-8 text; pass the provider's token")
        }
    }

    private static func describe(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}
