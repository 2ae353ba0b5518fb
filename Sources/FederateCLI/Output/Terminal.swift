import Federation
import SecureStorage
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes to the standard streams with plain `write(2)`: stdout carries only the
/// command's result, stderr only diagnostics.
package enum Terminal {
    /// Writes `text` to stdout as is.
    ///
    /// - Throws: exit 1 when stdout cannot take it (closed, disk full): a
    ///   credential_process must not exit 0 with its output lost.
    package static func out(_ text: String) throws(CLIFailure) {
        let code = writeAll(text, to: STDOUT_FILENO)
        guard code == 0 else {
            throw CLIFailure(.internalError, "could not write the output to stdout: \(String(cString: strerror(code))); check where stdout goes")
        }
    }

    /// Secrets this run holds (the provider token, the keystore key): nothing written to
    /// stderr may show 16 characters of one, whatever the library already scrubbed.
    private static let secrets = Mutex<[String]>([])

    /// Adds `secret` to what stderr never shows.
    package static func neverShow(_ secret: String) {
        // Registered early by `main` and again where the key is resolved: keep one copy.
        secrets.withLock { if !$0.contains(secret) { $0.append(secret) } }
    }

    /// Whether stderr would show `text` with part of it redacted: it holds a secret registered
    /// with ``neverShow(_:)`` that the redactor recognises (not one under 4 bytes, say).
    package static func holdsSecret(_ text: String) -> Bool {
        SecretRedactor(secrets: secrets.withLock { $0 }).redact(text) != text
    }

    /// Writes `federate: <message>` to stderr as exactly one line.
    package static func fail(_ message: String) {
        note(message)
    }

    /// A warning or progress note on stderr, one line.
    package static func note(_ message: String) {
        let redactor = SecretRedactor(secrets: secrets.withLock { $0 })
        _ = writeAll("federate: " + oneLine(redactor.redact(message)) + "\n", to: STDERR_FILENO)
    }

    /// Ends the process with `status`.
    package static func exit(_ status: ExitStatus) -> Never {
        #if canImport(Glibc)
        Glibc.exit(status.rawValue)
        #elseif canImport(Musl)
        Musl.exit(status.rawValue)
        #else
        Darwin.exit(status.rawValue)
        #endif
    }

    /// `text` with line breaks, other control characters (C0, DEL, C1) and bidirectional
    /// formatting characters replaced by spaces.
    package static func oneLine(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.map { $0.isControlOrBidirectionalFormat ? " " : $0 }))
    }

    /// Writes all of `text`; returns 0, or the `errno` of the failed `write(2)`.
    private static func writeAll(_ text: String, to descriptor: Int32) -> Int32 {
        var bytes = Array(text.utf8)
        let code = bytes.withUnsafeMutableBytes { buffer -> Int32 in
            var offset = 0
            while offset < buffer.count {
                let written = write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                offset += written
            }
            return 0
        }
        // The buffer may have held credentials: wipe it (best effort) before it is freed.
        for index in bytes.indices { bytes[index] = 0 }
        return code
    }
}

extension Terminal {
    /// Ends the process with a raw exit code (`federate exec` passes on its command's).
    package static func exit(code: Int32) -> Never {
        #if canImport(Glibc)
        Glibc.exit(code)
        #elseif canImport(Musl)
        Musl.exit(code)
        #else
        Darwin.exit(code)
        #endif
    }
}
