#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Where `serve` prints its token: standard output, checked first.
///
/// A redirect into a file another user made first (`> /tmp/alice.env`, where they created
/// `alice.env` and left it writable) opens their file: its owner can read the token and
/// fetch the session's credentials. The same holds for a named pipe they own. So `serve`
/// refuses a regular file or FIFO owned by anyone but this user or root, before it serves
/// anything. Whether a file of the user's own is readable to others its directories decide
/// as much as its mode, so a file others' mode bits allow (`> /tmp/x.env` under umask 022)
/// gets a note, not a refusal (``exposure()``).
package enum TokenDestination {
    /// Throws when standard output is a file or FIFO another user owns.
    package static func check() throws(CLIFailure) {
        var info = stat()
        guard fstat(STDOUT_FILENO, &info) == 0 else { return }
        let type = info.st_mode & S_IFMT
        guard type == S_IFREG || type == S_IFIFO else { return }
        guard info.st_uid != geteuid(), info.st_uid != 0 else { return }
        let kind = type == S_IFREG ? "a file" : "a named pipe"
        throw CLIFailure(
            .usage,
            "standard output is \(kind) owned by uid \(info.st_uid), who could read the credential server's token and fetch the session's credentials; "
                + "write the two lines to a file of your own, in a directory only you can enter (see 'federate help serve'); nothing was served")
    }

    /// A note when standard output is a regular file whose mode lets its group or others read
    /// it: whoever reads the token there can fetch the session's credentials while `serve`
    /// runs. `nil` otherwise.
    package static func exposure() -> String? {
        var info = stat()
        guard fstat(STDOUT_FILENO, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_mode & 0o044 != 0 else { return nil }
        let mode = String(info.st_mode & 0o777, radix: 8)
        return "note: standard output is a file its group or other users may read (mode 0\(mode)); unless its directory keeps them out, "
            + "whoever reads the token there can fetch the session's credentials: write it to a file only you can read (chmod 600, or umask 077 before creating it)"
    }
}
