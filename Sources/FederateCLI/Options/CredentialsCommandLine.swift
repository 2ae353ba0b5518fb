/// `federate credentials` read without argument-parser, for the command lines an SDK's
/// `credential_process` runs.
///
/// argument-parser builds its whole command tree through reflection (`Mirror`, `as?` casts
/// that each scan every protocol-conformance record, names derived with
/// `String(describing:)`), about a fifth of the CPU of a cache hit (docs/performance.md, 5b).
/// This reader accepts only command lines that argument-parser reads the same way:
/// `credentials` followed by long options it knows, each at most once, as `--name value` or
/// `--name=value`, with a non-empty value that does not start with `-`, and values that
/// convert and validate. Anything else (help, `--`, a short option, an unknown or repeated
/// option, a missing, empty or invalid value, a failed validation) returns `nil` and goes to
/// argument-parser, so every usage error, its message and its exit status stay argument-parser's.
/// It builds no option wrapper either: their initialisers cost argument-parser's generic
/// metadata and conformance lookups too. `CredentialsCommandLineTests` checks that both
/// readers agree.
enum CredentialsCommandLine {
    /// The command `arguments` (without the executable) name, or `nil` when argument-parser
    /// must read them.
    ///
    /// Plain `String` comparisons and optionals only: a `Set` or `Dictionary` of strings would
    /// instantiate generic metadata at run time, whose conformance checks cost what this
    /// reader saves.
    static func parse(_ arguments: [String]) -> CredentialsRequest? {
        guard arguments.first == "credentials" else { return nil }
        var session: String?, keystore: String?, accessGroup: String?, region: String?
        var endpoint: String?, expiryMargin: String?, format: String?
        var allowInsecureEndpoint = false, verbose = false
        var index = 1
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--") else { return nil }
            var name = String(argument.dropFirst(2))
            var value: String?
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if name == "allow-insecure-endpoint" || name == "verbose" {
                guard value == nil else { return nil }
                if name == "verbose" {
                    guard !verbose else { return nil }
                    verbose = true
                } else {
                    guard !allowInsecureEndpoint else { return nil }
                    allowInsecureEndpoint = true
                }
                continue
            }
            if value == nil, index < arguments.count {
                value = arguments[index]
                index += 1
            }
            guard let value, !value.isEmpty, !value.hasPrefix("-") else { return nil }
            switch name {
            case "session": guard Self.set(&session, value) else { return nil }
            case "keystore": guard Self.set(&keystore, value) else { return nil }
            case "access-group": guard Self.set(&accessGroup, value) else { return nil }
            case "region": guard Self.set(&region, value) else { return nil }
            case "endpoint": guard Self.set(&endpoint, value) else { return nil }
            case "expiry-margin": guard Self.set(&expiryMargin, value) else { return nil }
            case "format": guard Self.set(&format, value) else { return nil }
            default: return nil
            }
        }

        // The defaults are CommonOptions' and FormatOptions' declared ones; the tests compare
        // them with argument-parser's reading of a bare `credentials`.
        var margin = CommonOptions.defaultExpiryMarginSeconds
        if let expiryMargin {
            guard let parsed = Int(expiryMargin) else { return nil }
            margin = parsed
        }
        var output = OutputFormat.process
        if let format {
            guard let parsed = OutputFormat(rawValue: format) else { return nil }
            output = parsed
        }
        let request = CredentialsRequest(
            session: session ?? "default", keystore: keystore, accessGroup: accessGroup, region: region, endpoint: endpoint,
            expiryMargin: margin, allowInsecureEndpoint: allowInsecureEndpoint, verbose: verbose, format: output)
        guard CommonOptions.problem(session: request.session, expiryMargin: margin, accessGroup: accessGroup, keystore: keystore) == nil
        else { return nil }
        return request
    }

    /// Sets an option seen for the first time; a repeated one is argument-parser's to judge.
    private static func set(_ slot: inout String?, _ value: String) -> Bool {
        guard slot == nil else { return false }
        slot = value
        return true
    }
}
