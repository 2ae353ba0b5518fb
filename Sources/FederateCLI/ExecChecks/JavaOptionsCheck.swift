/// Finds JVM options in `exec`'s environment through which a Java or Kotlin AWS SDK would
/// take credentials from elsewhere than the session's endpoint.
///
/// The JVM SDKs read each setting from a system property before the environment variable
/// `exec` sets or removes (`aws.accessKeyId` before `AWS_ACCESS_KEY_ID`,
/// `aws.containerCredentialsFullUri` before `AWS_CONTAINER_CREDENTIALS_FULL_URI`, and so on),
/// and every JVM the command starts takes properties from these variables. So a
/// `-Daws.accessKeyId=…` in `JAVA_TOOL_OPTIONS` would make a Java command act as that
/// identity while the user believes it acts as the session, as a default profile with keys
/// would (``DefaultProfileCheck``). `exec` refuses to start the command and names the
/// variable and the properties, never their values.
///
/// Not seen: properties on the command's own `java` command line (the user wrote them there),
/// in an `@argfile`, or in a launcher script's own variable other than `JAVA_OPTS`.
package enum JavaOptionsCheck {
    /// Variables whose text becomes JVM options: read by every JVM, by the `java` launcher,
    /// by HotSpot, and by most launcher scripts (Tomcat's, Gradle's start scripts).
    package static let variables = ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS", "JAVA_OPTS"]

    /// System properties that give a JVM SDK credentials, or a place to find them, before
    /// the endpoint: static keys, a profile and its files, a web identity, the container
    /// provider's own settings.
    package static let credentialProperties: Set<String> = [
        "aws.accessKeyId", "aws.secretAccessKey", "aws.secretKey", "aws.sessionToken",
        "aws.profile", "aws.sharedCredentialsFile", "aws.configFile",
        "aws.webIdentityTokenFile", "aws.roleArn", "aws.roleSessionName",
        "aws.containerCredentialsPath", "aws.containerCredentialsFullUri",
        "aws.containerAuthorizationToken", "aws.containerAuthorizationTokenFile",
    ]

    /// Turns the instance metadata service back on, which `exec` turns off for the command
    /// (``CredentialEndpoint/instanceMetadataSetting(inherited:)``), unless its value is `true`.
    static let instanceMetadataProperty = "aws.disableEc2Metadata"

    /// One variable that sets such properties.
    package struct Finding: Sendable, Equatable {
        package var variable: String
        /// The properties' names (`-Daws.accessKeyId`), in the variable's order.
        package var properties: [String]
    }

    /// The findings in this process's environment, which `exec`'s command inherits.
    package static func findings() -> [Finding] {
        findings(environment: KeystoreAccess.environment)
    }

    /// ``findings()`` over an injected lookup.
    package static func findings(environment: (String) -> String?) -> [Finding] {
        variables.compactMap { variable in
            guard let text = environment(variable) else { return nil }
            let found = properties(in: text)
            return found.isEmpty ? nil : Finding(variable: variable, properties: found)
        }
    }

    /// The failure `exec` reports for `findings` (not empty).
    package static func failure(_ findings: [Finding], session: String) -> CLIFailure {
        let listed = findings.map { "$\($0.variable) (\($0.properties.joined(separator: ", ")))" }.joined(separator: " and ")
        let unset = findings.map { "-u \($0.variable)" }.joined(separator: " ")
        return CLIFailure(
            .usage,
            "\(listed) would give a Java command's AWS SDK credentials before those of session '\(session)'; "
                + "run with those properties removed (or through 'env \(unset) federate exec …'); nothing was run")
    }

    /// The credential properties `text` sets with `-D`, wherever they stand. JVM options are
    /// split on white space, and HotSpot drops quote characters wherever they are in an
    /// option (`-D'aws.accessKeyId'=…` sets `aws.accessKeyId`), so they are dropped first.
    static func properties(in quoted: String) -> [String] {
        let text = quoted.filter { $0 != "\"" && $0 != "'" }
        var found: [String] = []
        var rest = Substring(text)
        while let start = rest.firstRange(of: "-Daws.") {
            let nameStart = text.index(start.lowerBound, offsetBy: 2)
            let nameEnd = text[nameStart...].firstIndex { $0 == "=" || $0.isWhitespace } ?? text.endIndex
            let name = String(text[nameStart..<nameEnd])
            var valueEnd = nameEnd
            var value = ""
            if nameEnd < text.endIndex, text[nameEnd] == "=" {
                let valueStart = text.index(after: nameEnd)
                valueEnd = text[valueStart...].firstIndex { $0.isWhitespace } ?? text.endIndex
                value = String(text[valueStart..<valueEnd])
            }
            let counts = credentialProperties.contains(name)
                || (name == instanceMetadataProperty && value.lowercased() != "true")
            if counts, !found.contains("-D" + name) { found.append("-D" + name) }
            rest = text[valueEnd...]
        }
        return found
    }
}
