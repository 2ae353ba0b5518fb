import FederateCLI
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The command line as the kernel passed it, in bytes.
///
/// `CommandLine.arguments`, and so everything ArgumentParser parses, replaces bytes that are
/// not UTF-8 with U+FFFD. A command `federate exec` runs must get its arguments exactly as
/// typed: a file name in Latin-1, a binary pattern for `grep`.
enum RawArguments {
    /// The bytes of the arguments `parsed` came from: the last `parsed.count` of this
    /// process's arguments (what follows `--`). Falls back to `parsed`'s UTF-8 if those do
    /// not decode to `parsed`, which only a parser that rewrote them could cause.
    static func trailing(matching parsed: [String]) -> [[UInt8]] {
        let count = Int(CommandLine.argc)
        guard parsed.count < count else { return parsed.map { Array($0.utf8) } }
        let raw = (count - parsed.count..<count).map { index -> [UInt8] in
            guard let argument = CommandLine.unsafeArgv[index] else { return [] }
            return Array(UnsafeRawBufferPointer(start: argument, count: strlen(argument)))
        }
        // Decoding repairs as CommandLine.arguments does, so equal strings mean these bytes.
        guard zip(raw, parsed).allSatisfy({ String(decoding: $0, as: UTF8.self) == $1 }) else {
            return parsed.map { Array($0.utf8) }
        }
        return raw
    }

    /// Overwrites, in this process's own argument memory, the password of a `--keystore`
    /// database URL (before `--`) with `*`s: every local user can read a process's command
    /// line (`ps`, `/proc/<pid>/cmdline`), and `exec` and `serve` run for as long as their
    /// command or server does. What the parser reads is unchanged: `CommandLine.arguments`
    /// is copied first. (`federate` hands such a command line over at once; `mysql -p` does
    /// the same.)
    static func hideKeystorePasswords() {
        // Copied (once, for good) before anything is overwritten: what the parser reads.
        _ = CommandLine.arguments
        var index = 1
        var valueNext = false
        while index < Int(CommandLine.argc), let argument = CommandLine.unsafeArgv[index] {
            defer { index += 1 }
            let bytes = UnsafeMutableRawBufferPointer(start: argument, count: strlen(argument))
            if valueNext {
                valueNext = false
                hidePassword(in: bytes)
                continue
            }
            if bytes.elementsEqual("--".utf8) { return }
            if bytes.elementsEqual("--keystore".utf8) {
                valueNext = true
            } else if bytes.starts(with: "--keystore=".utf8) {
                hidePassword(in: UnsafeMutableRawBufferPointer(rebasing: bytes["--keystore=".utf8.count...]))
            }
        }
    }

    /// `scheme://user:password@host…`: the password's bytes become `*`.
    private static func hidePassword(in url: UnsafeMutableRawBufferPointer) {
        guard let password = URLPassword.range(in: url) else { return }
        for index in password { url[index] = UInt8(ascii: "*") }
    }
}
