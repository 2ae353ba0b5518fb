#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Finds files in which the AWS SDKs of `exec`'s command would find credentials before the
/// container endpoint `exec` gives it.
///
/// Every SDK's default chain reads the shared credentials and config files (the profile
/// `default` when no profile is named, and `exec` removes `AWS_PROFILE`) before the
/// container provider, and botocore (boto3, the AWS CLI) also reads boto 2's `~/.boto` and
/// `/etc/boto.cfg`. A default profile with keys, a role, a `credential_process` or SSO
/// would make the command act as that identity (often the machine's own, with more rights
/// than the session's) while the user believes it acts as the session. Those are files,
/// which `exec` cannot remove as it removes variables, so `exec` refuses to start the
/// command and says what to change.
///
/// The SDKs read these files differently (botocore through Python's `configparser`, the
/// others with parsers of their own), so the check takes the union of their readings: a
/// section counts as the default profile when any SDK would take it for one, a setting
/// counts when any SDK would see it there, and a file it cannot read without taking it from
/// the command (a FIFO) or cannot read whole counts as one it could not check. It may
/// refuse a file some SDK ignores; it should never pass one an SDK uses.
package enum DefaultProfileCheck {
    /// Settings that make a profile a source of credentials in some SDK's chain: static
    /// keys, a role to assume (from a profile, a web identity or the environment), an
    /// external process, IAM Identity Center (SSO), and `aws login`'s session.
    package static let credentialSettings: Set<String> = [
        "aws_access_key_id", "aws_secret_access_key", "aws_session_token",
        "role_arn", "source_profile", "credential_source", "web_identity_token_file",
        "credential_process",
        "sso_session", "sso_start_url", "sso_account_id", "sso_role_name",
        "login_session",
    ]

    /// The largest file read; a shared file is a few kilobytes (large SSO configurations a
    /// few megabytes).
    static let maxBytes = 64 * 1024 * 1024

    /// One file in which the command's SDK would find credentials first.
    package struct Finding: Sendable, Equatable {
        /// The file's path, as the SDKs resolve it.
        package var path: String
        /// The variable that names the file and can point it away (`nil` for boto's files,
        /// whose variable `exec` removes).
        package var variable: String?
        /// The credential settings found, in file order; or why the file could not be checked.
        package var settings: [String]
    }

    /// What a file holds for the check.
    package enum Contents: Sendable, Equatable {
        /// Missing, a directory, a device such as `/dev/null`: no SDK finds credentials there.
        case none
        case text(String)
        /// Not read: a FIFO or socket (reading it would take it from the command), or larger
        /// than ``maxBytes``; the reason in a few words.
        case unchecked(String)
    }

    private struct SharedFile {
        let variable: String?
        let defaultPaths: [String]
        let kind: Kind
    }

    enum Kind {
        case credentials, config, boto
    }

    /// The files of this process's environment (which `exec`'s command inherits) in which
    /// its SDK would find credentials before the endpoint.
    package static func findings() -> [Finding] {
        findings(environment: KeystoreAccess.environment, home: KeystoreAccess.homeDirectory, read: contents(ofFile:))
    }

    /// ``findings()`` over injected lookups.
    package static func findings(
        environment: (String) -> String?, home: String?, read: (String) -> Contents
    ) -> [Finding] {
        let files = [
            SharedFile(variable: "AWS_SHARED_CREDENTIALS_FILE", defaultPaths: ["~/.aws/credentials"], kind: .credentials),
            SharedFile(variable: "AWS_CONFIG_FILE", defaultPaths: ["~/.aws/config"], kind: .config),
            SharedFile(variable: nil, defaultPaths: ["/etc/boto.cfg", "~/.boto"], kind: .boto),
        ]
        var result: [Finding] = []
        var seen: Set<String> = []
        for file in files {
            for path in paths(of: file, environment: environment, home: home) where seen.insert(path).inserted {
                switch read(path) {
                case .none:
                    continue
                case .unchecked(let reason):
                    result.append(Finding(path: path, variable: file.variable, settings: [reason]))
                case .text(let text):
                    let settings = credentialSettingsFound(in: text, kind: file.kind)
                    if !settings.isEmpty { result.append(Finding(path: path, variable: file.variable, settings: settings)) }
                }
            }
        }
        return result
    }

    /// The failure `exec` reports for `findings` (not empty): which files, which settings,
    /// and what to change.
    package static func failure(_ findings: [Finding], session: String) -> CLIFailure {
        let files = findings.map { "\($0.path) (\($0.settings.joined(separator: ", ")))" }.joined(separator: " and ")
        var variables: [String] = []
        for variable in findings.compactMap(\.variable) where !variables.contains(variable) { variables.append(variable) }
        var fixes = variables.map { "\($0)=/dev/null" }.joined(separator: " ")
        if variables.contains("AWS_CONFIG_FILE") { fixes += " with AWS_REGION and AWS_DEFAULT_REGION set" }
        let change = fixes.isEmpty
            ? "remove those settings"
            : "run with \(fixes), or remove those settings"
        return CLIFailure(
            .usage,
            "\(files) would give the command's AWS SDK credentials before those of session '\(session)'; "
                + "\(change); nothing was run")
    }

    /// The paths the SDKs read for `file`: the variable's value (empty counts as unset, as
    /// the Go and JavaScript SDKs take it), as written and with `$VAR`s expanded (botocore
    /// expands them), `~/` expanded; else the default paths.
    private static func paths(of file: SharedFile, environment: (String) -> String?, home: String?) -> [String] {
        let chosen: [String]
        if let variable = file.variable, let value = environment(variable), !value.isEmpty {
            chosen = [value, expandingVariables(value, environment: environment)]
        } else {
            chosen = file.defaultPaths
        }
        var paths: [String] = []
        for path in chosen.compactMap({ expandingHome($0, home: home) }) where !paths.contains(path) { paths.append(path) }
        return paths
    }

    static func expandingHome(_ path: String, home: String?) -> String? {
        if path == "~" { return home }
        if path.hasPrefix("~/") { return home.map { $0 + path.dropFirst() } }
        return path
    }

    /// `$NAME` and `${NAME}` replaced by their values (unset ones left as written, as
    /// Python's `os.path.expandvars` does).
    static func expandingVariables(_ text: String, environment: (String) -> String?) -> String {
        var result = ""
        var rest = Substring(text)
        while let dollar = rest.firstIndex(of: "$") {
            result += rest[..<dollar]
            let after = rest[rest.index(after: dollar)...]
            let braced = after.first == "{"
            let nameStart = braced ? after.index(after: after.startIndex) : after.startIndex
            let nameEnd = after[nameStart...].firstIndex { !($0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_")) } ?? after.endIndex
            let name = String(after[nameStart..<nameEnd])
            let closes = !braced || (nameEnd < after.endIndex && after[nameEnd] == "}")
            if !name.isEmpty, closes, let value = environment(name) {
                result += value
                rest = braced ? after[after.index(after: nameEnd)...] : after[nameEnd...]
            } else {
                result += "$"
                rest = after
            }
        }
        return result + rest
    }

    /// The credential settings a default section of `text` holds (for boto's files, its
    /// `[Credentials]` section's keys), in file order, each once. A default profile whose only
    /// credential settings take a role with the container's credentials
    /// (`credential_source = EcsContainer`) counts for nothing: its source is the session.
    static func credentialSettingsFound(in text: String, kind: Kind) -> [String] {
        var names: [String] = []
        var credentialSource: String?
        for (name, value) in settingsOfDefaultSections(text, kind: kind) where credentialSettings.contains(name) {
            if name == "credential_source" { credentialSource = value }
            if !names.contains(name) { names.append(name) }
        }
        if Set(names).isSubset(of: ["role_arn", "credential_source"]), credentialSource?.lowercased() == "ecscontainer" {
            return []
        }
        return names
    }

    /// The settings (names lowercased, as botocore's parser makes them, with their values) of
    /// the sections of an INI text that some SDK would read as the default profile.
    ///
    /// - Lines end at `\n`, `\r\n` or `\r` only; a leading byte order mark is dropped.
    /// - A line that starts with `#` or `;` (after blanks) is a comment.
    /// - A header counts as the default profile's when any reading makes it so: up to its
    ///   last `]` (botocore), or up to the first `]` after cutting a `#` or `;` comment (the
    ///   Java, Go and JavaScript SDKs); its words, quotes and backslashes dropped as botocore's
    ///   `shlex` drops them, are `default`, or `profile default` in the config file, or
    ///   `DEFAULT` (Python's `configparser` gives that section's keys to every section).
    /// - An indented header continues the previous setting for botocore and starts a section
    ///   for the others: a default section stays one across it.
    /// - Indented settings count (botocore reads one as a setting when no setting came
    ///   before it; the nested lines of a setting such as `s3 =` name no credential setting).
    static func settingsOfDefaultSections(_ text: String, kind: Kind) -> [(name: String, value: String)] {
        var body = Substring(text)
        if body.first == "\u{FEFF}" { body = body.dropFirst() }
        var inDefault = false
        var settings: [(name: String, value: String)] = []
        for rawLine in body.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r" || $0 == "\r\n" }) {
            let line = rawLine.trimmingPythonWhitespace()
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            let indented = rawLine.first.map(\.isPythonWhitespace) ?? false
            if line.hasPrefix("[") {
                let isDefault = headerNames(line).contains { isDefaultSection($0, kind: kind) }
                inDefault = isDefault || (indented && inDefault)
                continue
            }
            guard inDefault, let separator = line.firstIndex(where: { $0 == "=" || $0 == ":" }) else { continue }
            let name = line[..<separator].trimmingPythonWhitespace().lowercased()
            let value = String(line[line.index(after: separator)...].trimmingPythonWhitespace())
            settings.append((name, value))
        }
        return settings
    }

    /// The section names a header line gives under each SDK's reading.
    private static func headerNames(_ line: Substring) -> [Substring] {
        var names: [Substring] = []
        // botocore (configparser): from the first `[` to the last `]`.
        if let close = line.lastIndex(of: "]"), close > line.startIndex {
            names.append(line[line.index(after: line.startIndex)..<close])
        }
        // Java, Go, JavaScript: a comment cut off first, then up to the first `]`.
        let uncommented = line.prefix { $0 != "#" && $0 != ";" }
        if let close = uncommented.firstIndex(of: "]"), close > uncommented.startIndex {
            names.append(uncommented[uncommented.index(after: uncommented.startIndex)..<close])
        }
        return names
    }

    private static func isDefaultSection(_ name: Substring, kind: Kind) -> Bool {
        let words = name.filter { $0 != "\"" && $0 != "'" && $0 != "\\" }.split(whereSeparator: \.isPythonWhitespace)
        switch kind {
        case .boto:
            return words == ["Credentials"] || words == ["DEFAULT"]
        case .credentials:
            return words == ["default"] || words == ["DEFAULT"]
        case .config:
            return words == ["default"] || words == ["DEFAULT"] || words == ["profile", "default"]
        }
    }

    /// What the file at `path` holds for the check, following symbolic links as the SDKs do,
    /// opened non-blocking (a FIFO must neither block nor lose its data to the check) and
    /// examined as opened.
    static func contents(ofFile path: String) -> Contents {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            // Missing, or unreadable here and so to the command (same user): no credentials
            // from it. Any other failure (out of descriptors, an I/O error) says nothing.
            let code = errno
            return [ENOENT, ENOTDIR, EACCES, EISDIR].contains(code) ? .none : .unchecked("not readable now: \(String(cString: strerror(code)))")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return .unchecked("not readable now: \(String(cString: strerror(errno)))") }
        switch status.st_mode & S_IFMT {
        case S_IFREG:
            break
        case S_IFIFO, S_IFSOCK:
            return .unchecked("a FIFO or socket, which the check cannot read without taking it from the command")
        default:
            return .none  // a directory, /dev/null: the SDKs read no profile from it
        }
        let tooLarge = Contents.unchecked("larger than \(maxBytes >> 20) MiB, not checked")
        guard Int(status.st_size) <= maxBytes else { return tooLarge }
        let bytes: [UInt8]
        do throws(BoundedInput.Failure) {
            bytes = try BoundedInput.readOpenedFile(descriptor, limit: maxBytes)
        } catch {
            return .unchecked(BoundedInput.describe(error, source: "the file"))
        }
        guard bytes.count <= maxBytes else { return tooLarge }
        return .text(String(decoding: bytes, as: UTF8.self))
    }
}

extension Character {
    /// Whitespace as Python's `str.strip()` takes it: Unicode whitespace, and the separators
    /// U+001C to U+001F.
    fileprivate var isPythonWhitespace: Bool {
        isWhitespace || unicodeScalars.allSatisfy { (0x1C...0x1F).contains($0.value) }
    }
}

extension Substring {
    fileprivate func trimmingPythonWhitespace() -> Substring {
        guard let first = firstIndex(where: { !$0.isPythonWhitespace }), let last = lastIndex(where: { !$0.isPythonWhitespace }) else {
            return self[endIndex...]
        }
        return self[first...last]
    }
}
