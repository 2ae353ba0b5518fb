#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Whether a file the command line names (a certificate authority bundle) can be read.
package enum ReadableFile {
    /// Why `path` is not a regular file this process can read, or `nil` when it is.
    package static func problem(at path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else { return String(cString: strerror(errno)) }
        guard info.st_mode & S_IFMT == S_IFREG else { return "not a regular file" }
        guard access(path, R_OK) == 0 else { return String(cString: strerror(errno)) }
        return nil
    }
}
