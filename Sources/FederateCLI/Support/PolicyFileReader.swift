#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads `--policy-file`: UTF-8 text of at most ``maxBytes`` bytes (STS takes 2,048
/// characters of packed policy; the cap only keeps a wrong file out of memory).
enum PolicyFileReader {
    static let maxBytes = 64 * 1024

    static func contents(ofFile path: String) throws(CLIFailure) -> String {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw CLIFailure(.usage, "cannot read policy file '\(path)': \(String(cString: strerror(errno))); check --policy-file")
        }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while bytes.count <= maxBytes {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw CLIFailure(.usage, "cannot read policy file '\(path)': \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        guard bytes.count <= maxBytes else {
            throw CLIFailure(.usage, "policy file '\(path)' is larger than \(maxBytes) bytes; STS takes a session policy of 2048 characters at most")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw CLIFailure(.usage, "policy file '\(path)' is not UTF-8 text")
        }
        guard text.contains(where: { !$0.isWhitespace }) else {
            throw CLIFailure(.usage, "policy file '\(path)' is empty; leave --policy-file out instead")
        }
        return text
    }
}
