#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Federation

/// Reads `--policy-file`: a JSON object in UTF-8 text of at most ``maxBytes`` bytes (STS takes 2,048
/// characters of packed policy; the cap only keeps a wrong file out of memory).
enum PolicyFileReader {
    static let maxBytes = 64 * 1024

    static func contents(ofFile path: String) throws(CLIFailure) -> String {
        let bytes: [UInt8]
        do throws(BoundedInput.Failure) {
            bytes = try BoundedInput.readFile(path, limit: maxBytes)
        } catch {
            throw CLIFailure(.usage, "\(BoundedInput.describe(error, source: "policy file '\(path)'")); check --policy-file")
        }
        guard bytes.count <= maxBytes else {
            throw CLIFailure(.usage, "policy file '\(path)' is larger than \(maxBytes) bytes; STS takes a session policy of 2048 characters at most")
        }
        // A byte order mark some editors write is not part of the policy STS is sent.
        let unmarked = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? Array(bytes.dropFirst(3)) : bytes
        guard let text = String(validating: unmarked, as: UTF8.self) else {
            throw CLIFailure(.usage, "policy file '\(path)' is not UTF-8 text; pass a JSON IAM policy")
        }
        guard text.contains(where: { !$0.isWhitespace }) else {
            throw CLIFailure(.usage, "policy file '\(path)' is empty; leave --policy-file out instead")
        }
        guard ClassicFlowOptions.isJSONObject(text) else {
            throw CLIFailure(.usage, "policy file '\(path)' is not a JSON object; \(ClassicFlowOptions.policyExample)")
        }
        return text
    }
}
