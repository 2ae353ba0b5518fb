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
}
