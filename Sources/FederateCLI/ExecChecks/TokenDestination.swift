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
/// anything. It cannot tell whether a file of the user's own is readable to others (its
/// directory decides that), so the docs say where to write.
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
}
