import ArgumentParser
import Federation

/// How a usage error (exit 2) reads: the option at fault named first, with the nearest real
/// one, never quoting what may be a secret, and where to look next.
extension Federate {
    /// Where a usage error points: the subcommand's help when one was named, and for the
    /// options of a session given to `rekey` or `migrate` (which earlier releases accepted
    /// and ignored), why they take none.
    static func usageHint(for message: String, arguments: [String] = CommandLine.arguments) -> String {
        guard let named = namedSubcommand(in: arguments)?._commandName else {
            return "; run 'federate --help' for usage"
        }
        let takes = named == "migrate" ? "--from, --to, --keystore and --verbose" : "--keystore, --access-group and --verbose"
        if named == "migrate" && message.contains("'--access-group'") {
            return "; migrate names its two groups with --from and --to: give it only \(takes)"
        }
        let sessionOptions = ["--session", "--region", "--endpoint", "--expiry-margin", "--allow-insecure-endpoint"]
        if ["rekey", "migrate"].contains(named), sessionOptions.contains(where: { message.contains("'\($0)'") }) {
            return "; \(named) works on every session of an access group and never calls the network: give it only \(takes)"
        }
        return "; run 'federate \(named) --help' for usage"
    }

    /// What to say for argument-parser's `message`: its own words (the suggestion as one
    /// clause), except that a misspelt option is named first when it reported something else
    /// first (a missing required option, or one of our checks of the options it read, come
    /// before options it does not know: `login --pool_id …` said "Missing expected argument
    /// '--pool-id'"), and an unknown "option" that may be a pasted token is never quoted.
    static func usageMessage(_ message: String, arguments: [String]) -> String {
        // Its own report of an option's missing value names the option before it; the
        // argument after it (`--token-file --x…`) may be a token.
        if message.hasPrefix("Missing value for") { return negativeNumberRead(as: message, in: arguments) ?? message }
        // What follows a mistyped subcommand is judged against the top level, where every
        // option is unknown: `federate credential --session x` said "Unknown option '--session'".
        if let unknown = unknownSubcommand(in: arguments) { return unknown }
        guard let (name, suggestion) = firstUnknownOption(in: arguments) else {
            // A clause: the hint follows it after a semicolon.
            let clause = withSuggestionInParentheses(message)
            return clause.hasSuffix(".") ? String(clause.dropLast()) : clause
        }
        // Quoted when short, or close to a real option: a longer pasted secret (an API key
        // after `--`) is neither, and 16 characters of one are too many.
        guard name.utf8.count < 16 || suggestion != nil, !looksLikeAToken(name),
              name.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || ArgumentShape.isBase64URL($0) })
        else {
            return "Unknown option: an argument of \(name.utf8.count) bytes that starts with -- (not shown: it may hold a secret)"
        }
        return "Unknown option '\(name)'" + (suggestion.map { " (did you mean '\($0)'?)" } ?? "")
    }

    /// `--expiry-margin -5`: argument-parser takes `-5` for an option and reports the value
    /// missing. Said as what it is for the options that take a number, when the argument after
    /// the one named is a negative whole number (quoted: at most 15 bytes, and no secret);
    /// `nil` otherwise.
    private static func negativeNumberRead(as message: String, in arguments: [String]) -> String? {
        let ranges = [
            "--expiry-margin": "0 or more",
            "--duration": "\(ClassicFlowOptions.minimumDurationSeconds) to \(ClassicFlowOptions.maximumDurationSeconds) seconds",
        ]
        guard let start = message.firstIndex(of: "'") else { return nil }
        let name = String(message[message.index(after: start)...].prefix { $0 != " " && $0 != "'" })
        guard let range = ranges[name], let at = arguments.firstIndex(of: name), at + 1 < arguments.count else { return nil }
        let next = arguments[at + 1]
        guard next.utf8.count > 1, next.utf8.count < 16, next.hasPrefix("-"),
              next.utf8.dropFirst().allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return "\(name) must be \(range), not \(next)"
    }

    /// What to say when the first argument (or the one after `help`) is neither an option nor
    /// a subcommand: "unknown subcommand 'credential' (did you mean 'credentials'?)", the
    /// nearest name suggested as for options; not quoted when it may be a secret (a token
    /// pasted first). `nil` otherwise.
    static func unknownSubcommand(in arguments: [String]) -> String? {
        let names = configuration.subcommands.map { $0._commandName } + ["help"]
        var given = arguments.dropFirst()
        if given.first == "help" { given = given.dropFirst() }
        guard let name = given.first, !name.hasPrefix("-"), !names.contains(name) else { return nil }
        let spelt = name.lowercased()
        let closest = names.sorted().map { (name: $0, distance: editDistance($0, spelt)) }.min { $0.distance < $1.distance }
        // Fewer edits than for options, and at most a third of the name: names are short, and
        // "bogus" is three edits from "login".
        let suggestion = closest.flatMap { $0.distance < 4 && $0.distance <= max(1, spelt.count / 3) ? $0.name : nil }
        guard name.utf8.count < 16 || suggestion != nil, !looksLikeAToken(name),
              name.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || ArgumentShape.isBase64URL($0) })
        else {
            return "unknown subcommand: an argument of \(name.utf8.count) bytes (not shown: it may hold a secret)"
        }
        return "unknown subcommand '\(name)'" + (suggestion.map { " (did you mean '\($0)'?)" } ?? "")
    }

    /// The subcommand `arguments` name first, if they name one.
    private static func namedSubcommand(in arguments: [String]) -> (any ParsableCommand.Type)? {
        guard let named = arguments.dropFirst().first else { return nil }
        return configuration.subcommands.first { $0._commandName == named }
    }

    /// The first `--` argument (its name, before any `=`) that the subcommand named in
    /// `arguments` does not take, with the nearest option it takes when that is close (as
    /// argument-parser suggests: fewer than 4 edits, case and `_` for `-` aside; ties go to
    /// the first in byte order); `nil` when there is none. Values are skipped: the argument
    /// after an option that takes one, and everything after `--`, which `exec` needs (and
    /// without it, `exec`'s own complaint is the right one).
    private static func firstUnknownOption(in arguments: [String]) -> (name: String, suggestion: String?)? {
        guard let subcommand = namedSubcommand(in: arguments) else { return nil }
        if subcommand._commandName == "exec" && !arguments.contains("--") { return nil }
        let help = helpMessage(for: subcommand, includeHidden: true, columns: 100_000)
        let known = optionNames(in: help)
        var skipValue = false
        for argument in arguments.dropFirst(2).prefix(while: { $0 != "--" }) {
            if skipValue {
                skipValue = false
                continue
            }
            guard argument.hasPrefix("--") else { continue }
            let name = String(argument.prefix { $0 != "=" })
            if let takesValue = known[name] {
                skipValue = takesValue && !argument.contains("=")
                continue
            }
            // No real option is 40 bytes long: a longer argument is suggested nothing (and
            // never compared, at its length).
            guard name.utf8.count <= 40 else { return (name, nil) }
            let spelt = String(name.lowercased().map { $0 == "_" ? "-" : $0 })
            let closest = known.keys.sorted().map { (name: $0, distance: editDistance($0, spelt)) }
                .min { $0.distance < $1.distance }
            return (name, closest.flatMap { $0.distance < 4 ? $0.name : nil })
        }
        return nil
    }

    /// Every `--name` in a help text, and whether it takes a value (`--name <VALUE>`).
    private static func optionNames(in help: String) -> [String: Bool] {
        var names: [String: Bool] = ["--help": false]
        let text = Array(help.utf8)
        var index = 0
        while index + 2 < text.count {
            guard text[index] == UInt8(ascii: "-"), text[index + 1] == UInt8(ascii: "-"),
                  index == 0 || text[index - 1] == UInt8(ascii: " ") || text[index - 1] == UInt8(ascii: "[") || text[index - 1] == UInt8(ascii: "(")
            else {
                index += 1
                continue
            }
            var end = index + 2
            while end < text.count, text[end] == UInt8(ascii: "-") || (text[end] >= UInt8(ascii: "a") && text[end] <= UInt8(ascii: "z"))
                || (text[end] >= UInt8(ascii: "0") && text[end] <= UInt8(ascii: "9")) { end += 1 }
            if end > index + 2 {
                let name = String(decoding: text[index..<end], as: UTF8.self)
                let takesValue = end + 1 < text.count && text[end] == UInt8(ascii: " ") && text[end + 1] == UInt8(ascii: "<")
                names[name] = (names[name] ?? false) || takesValue
            }
            index = end
        }
        return names
    }

    /// The Levenshtein distance between two option names.
    private static func editDistance(_ a: String, _ b: String) -> Int {
        let (a, b) = (Array(a.utf8), Array(b.utf8))
        guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
        var row = Array(0...b.count)
        for i in 1...a.count {
            var diagonal = row[0]
            row[0] = i
            for j in 1...b.count {
                let substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)
                diagonal = row[j]
                row[j] = min(substitution, row[j] + 1, row[j - 1] + 1)
            }
        }
        return row[b.count]
    }

    /// argument-parser's "Unknown option '--sesion'. Did you mean '--session'?" as one clause,
    /// "Unknown option '--sesion' (did you mean '--session'?)", which the hint can follow.
    static func withSuggestionInParentheses(_ message: String) -> String {
        guard let range = message.firstRange(of: ". Did you mean "), message.hasSuffix("?") else { return message }
        return String(message[..<range.lowerBound]) + " (did you mean " + String(message[range.upperBound...]) + ")"
    }
}
