#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Finds a default profile in the AWS shared files that the SDKs in `exec`'s command
/// would take credentials from before the container endpoint `exec` gives it.
///
/// Every SDK's default chain reads the shared credentials and config files (the profile
/// `default` when no profile is named, and `exec` removes `AWS_PROFILE`) before the
/// container provider. A `[default]` profile with keys, a role, a `credential_process` or
/// SSO would make the command act as that identity (often the machine's own, with more
/// rights than the session's) while the user believes it acts as the session. That is a
/// file, which `exec` cannot remove as it removes variables, so `exec` refuses to start
/// the command and says which variable points the file away.
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

    /// The largest file read; a shared file is a few kilobytes.
    static let maxBytes = 1024 * 1024

    /// One shared file whose default profile supplies credentials.
    package struct Finding: Sendable, Equatable {
        /// The file's path, as the SDKs resolve it.
        package var path: String
        /// The variable that names the file (`AWS_SHARED_CREDENTIALS_FILE` or `AWS_CONFIG_FILE`).
        package var variable: String
        /// The credential settings found, in file order.
        package var settings: [String]
    }

    /// The shared files of this process's environment (which `exec`'s command inherits) whose
    /// default profile supplies credentials: the credentials file first, then the config file.
    package static func findings() -> [Finding] {
        findings(environment: KeystoreAccess.environment, home: KeystoreAccess.homeDirectory, read: contents(ofFile:))
    }

    /// ``findings()`` over injected lookups.
    package static func findings(
        environment: (String) -> String?, home: String?, read: (String) -> String?
    ) -> [Finding] {
        let files = [
            (variable: "AWS_SHARED_CREDENTIALS_FILE", defaultName: ".aws/credentials", isConfig: false),
            (variable: "AWS_CONFIG_FILE", defaultName: ".aws/config", isConfig: true),
        ]
        return files.compactMap { file in
            guard let path = resolvedPath(environment(file.variable), defaultName: file.defaultName, home: home),
                let text = read(path)
            else { return nil }
            let settings = defaultProfileSettings(text, isConfig: file.isConfig).filter(credentialSettings.contains)
            return settings.isEmpty ? nil : Finding(path: path, variable: file.variable, settings: settings)
        }
    }

    /// The failure `exec` reports for `findings` (not empty): which files, which settings,
    /// and the variables that point them away.
    package static func failure(_ findings: [Finding], session: String) -> CLIFailure {
        let files = findings.map { "\($0.path) (\($0.settings.joined(separator: ", ")))" }.joined(separator: " and ")
        var fixes = findings.map { "\($0.variable)=/dev/null" }.joined(separator: " ")
        if findings.contains(where: { $0.variable == "AWS_CONFIG_FILE" }) {
            fixes += " with AWS_REGION set"
        }
        return CLIFailure(
            .usage,
            "the default profile in \(files) gives credentials that the AWS SDKs would use before session '\(session)''s; "
                + "run with \(fixes), or remove those settings from the default profile; nothing was run")
    }

    /// The path the SDKs read: the variable's value (with `~/` expanded), else `~/<defaultName>`;
    /// `nil` when neither can be named (an empty variable names no file).
    static func resolvedPath(_ value: String?, defaultName: String, home: String?) -> String? {
        guard let value else { return home.map { "\($0)/\(defaultName)" } }
        if value.isEmpty { return nil }
        if value == "~" { return home }
        if value.hasPrefix("~/") {
            return home.map { $0 + value.dropFirst() }
        }
        return value
    }

    /// The setting names (lowercased, as botocore's parser makes them) of the default
    /// profile in an INI text: the section `[default]`, and in the config file also
    /// `[profile default]`. Comment lines and indented lines (a nested setting's lines,
    /// such as `s3 =`'s) are skipped.
    static func defaultProfileSettings(_ text: String, isConfig: Bool) -> [String] {
        var inDefault = false
        var settings: [String] = []
        for rawLine in text.split(omittingEmptySubsequences: true, whereSeparator: \.isNewline) {
            let line = rawLine.trimmingWhitespace()
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("[") {
                guard let close = line.lastIndex(of: "]") else { continue }
                let words = line[line.index(after: line.startIndex)..<close].split(whereSeparator: \.isWhitespace)
                inDefault = words == ["default"] || (isConfig && words == ["profile", "default"])
                continue
            }
            guard inDefault, let first = rawLine.first, !first.isWhitespace else { continue }
            guard let separator = line.firstIndex(where: { $0 == "=" || $0 == ":" }) else { continue }
            settings.append(line[..<separator].trimmingWhitespace().lowercased())
        }
        return settings
    }

    /// A regular file's text, or `nil` when it is missing, unreadable, not a regular file
    /// (a FIFO would block the SDKs as much as this) or larger than ``maxBytes``: the
    /// command could not take credentials from it either.
    static func contents(ofFile path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG, Int(status.st_size) <= maxBytes,
            let bytes = try? BoundedInput.readOpenedFile(descriptor, limit: maxBytes), bytes.count <= maxBytes
        else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension Substring {
    fileprivate func trimmingWhitespace() -> Substring {
        let text = self
        guard let first = text.firstIndex(where: { !$0.isWhitespace }), let last = text.lastIndex(where: { !$0.isWhitespace }) else {
            return text[text.endIndex...]
        }
        return text[first...last]
    }
}
