@testable import FederateCLI
import Foundation
import XCTest

/// Which files `exec` treats as giving its command's AWS SDK credentials before its
/// endpoint: the union of the SDKs' readings (botocore's `configparser`, and the Java, Go and
/// JavaScript SDKs' parsers), so that no file an SDK would use passes.
final class DefaultProfileCheckTests: XCTestCase {
    private func found(_ text: String, _ kind: DefaultProfileCheck.Kind = .credentials) -> [String] {
        DefaultProfileCheck.credentialSettingsFound(in: text, kind: kind)
    }

    func testTheDefaultSectionsCredentialSettingsAreFound() {
        let text = """
            # keys for the build machine
            [other]
            aws_access_key_id = AKIAOTHER

            [default]
            AWS_Access_Key_Id=AKIADEFAULT
            aws_secret_access_key : s3cr3t
            ; a comment = not a setting
            region = eu-west-1
            s3 =
              max_concurrent_requests = 20
            [after]
            credential_process = /bin/true
            """
        XCTAssertEqual(found(text), ["aws_access_key_id", "aws_secret_access_key"])
        XCTAssertEqual(found("[default]\nregion = us-east-1\noutput = json\n", .config), [])
        XCTAssertEqual(found("[defaults]\naws_access_key_id = x\n[profile defaultish]\nrole_arn = x\n", .config), [])
    }

    /// Forms some SDK reads as the default profile, each of which an earlier version missed.
    func testEveryReadingOfADefaultSectionCounts() {
        // Indented settings: botocore reads one as a setting when none came before it.
        XCTAssertEqual(found("[default]\n  aws_access_key_id = AK\n\taws_secret_access_key = SK\n"), ["aws_access_key_id", "aws_secret_access_key"])
        // configparser's DEFAULT section gives its keys to every section.
        XCTAssertEqual(found("[DEFAULT]\ncredential_process = /usr/bin/helper\n[default]\nregion = x\n", .config), ["credential_process"])
        // botocore splits section names with shlex: quotes and backslashes go.
        XCTAssertEqual(found("[profile \"default\"]\nrole_arn = arn\nsource_profile = base\n", .config), ["role_arn", "source_profile"])
        XCTAssertEqual(found("[profile 'def\"ault\"']\nsso_session = corp\n", .config), ["sso_session"])
        XCTAssertEqual(found("[ profile   default ]\r\nsso_session = corp\r\n", .config), ["sso_session"])
        // A comment after the header: the Java, Go and JavaScript SDKs cut it off first.
        XCTAssertEqual(found("[default] # see [docs]\naws_access_key_id = AK\n"), ["aws_access_key_id"])
        XCTAssertEqual(found("[default] ;x]\naws_access_key_id = AK\n"), ["aws_access_key_id"])
        // A byte order mark: JavaScript's trim and .NET drop it.
        XCTAssertEqual(found("\u{FEFF}[default]\naws_access_key_id = AK\n"), ["aws_access_key_id"])
        // Only \n, \r\n and \r end lines: a form feed does not end the section.
        XCTAssertEqual(found("[default]\nregion = x\u{0C}[other]\naws_access_key_id = AK\n"), ["aws_access_key_id"])
        // An indented header continues a value for botocore: the section stays the default.
        XCTAssertEqual(found("[default]\nregion = x\n  [other]\naws_access_key_id = AK\n"), ["aws_access_key_id"])
        // `[profile default]` names no profile in the credentials file.
        XCTAssertEqual(found("[profile default]\ncredential_process = /usr/bin/helper\n"), [])
    }

    func testARoleTakenWithTheContainersCredentialsIsNoOtherSource() {
        XCTAssertEqual(found("[default]\nrole_arn = arn:aws:iam::1:role/r\ncredential_source = EcsContainer\n", .config), [])
        XCTAssertEqual(
            found("[default]\nrole_arn = arn:aws:iam::1:role/r\ncredential_source = Ec2InstanceMetadata\n", .config),
            ["role_arn", "credential_source"])
        // Beside anything else, the container's credentials no longer decide: the keys or the
        // process would sign instead of the session.
        XCTAssertEqual(
            found("[default]\naws_access_key_id = AK\naws_secret_access_key = SK\ncredential_source = EcsContainer\n", .config),
            ["aws_access_key_id", "aws_secret_access_key", "credential_source"])
        XCTAssertEqual(
            found("[default]\ncredential_process = /usr/bin/helper\nrole_arn = arn:aws:iam::1:role/r\ncredential_source = EcsContainer\n", .config),
            ["credential_process", "role_arn", "credential_source"])
    }

    /// Each setting that makes a profile a source of credentials in some SDK counts alone,
    /// in either file (spelled out here: a name dropped from the check's own list must fail).
    func testEachCredentialSettingCountsAlone() {
        let settings = [
            "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "role_arn", "source_profile",
            "credential_source", "web_identity_token_file", "credential_process", "sso_session", "sso_start_url",
            "sso_account_id", "sso_role_name", "login_session",
        ]
        for name in settings {
            XCTAssertEqual(found("[default]\n\(name) = x\n"), [name], name)
            XCTAssertEqual(found("[profile default]\n\(name) = x\n", .config), [name], name)
        }
        // configparser's DEFAULT section in the credentials file too.
        XCTAssertEqual(found("[DEFAULT]\naws_access_key_id = AK\n[other]\nregion = x\n"), ["aws_access_key_id"])
    }

    func testBotosOwnFilesCount() {
        XCTAssertEqual(found("[Credentials]\naws_access_key_id = AK\naws_secret_access_key = SK\n", .boto), ["aws_access_key_id", "aws_secret_access_key"])
        XCTAssertEqual(found("[Boto]\ndebug = 0\n", .boto), [])
    }

    func testTheVariablesNameTheFilesAndAnEmptyOneTheDefault() {
        let files: [String: DefaultProfileCheck.Contents] = [
            "/srv/creds": .text("[default]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = base\n"),
            "/home/u/cfg": .text("[profile default]\nweb_identity_token_file = /t\nrole_arn = arn\n"),
            "/home/u/.aws/credentials": .text("[default]\naws_access_key_id = AK\n"),
            "/home/u/.boto": .text("[Credentials]\naws_access_key_id = AK\n"),
            "/etc/boto.cfg": .text("[Credentials]\naws_secret_access_key = SK\n"),
        ]
        var variables = ["AWS_SHARED_CREDENTIALS_FILE": "/srv/creds", "AWS_CONFIG_FILE": "~/cfg"]
        var findings = DefaultProfileCheck.findings(environment: { variables[$0] }, home: "/home/u", read: { files[$0] ?? .none })
        XCTAssertEqual(findings.map(\.path), ["/srv/creds", "/home/u/cfg", "/etc/boto.cfg", "/home/u/.boto"])
        XCTAssertEqual(findings.map(\.variable), ["AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", nil, nil])
        XCTAssertEqual(findings[1].settings, ["web_identity_token_file", "role_arn"])
        XCTAssertEqual(findings[2].settings, ["aws_secret_access_key"])

        // Pointed away: only boto's files are left, which no variable moves.
        variables = ["AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_CONFIG_FILE": "/dev/null"]
        findings = DefaultProfileCheck.findings(environment: { variables[$0] }, home: "/home/u", read: { files[$0] ?? .none })
        XCTAssertEqual(findings.map(\.path), ["/etc/boto.cfg", "/home/u/.boto"])
        // An empty variable is unset to the Go and JavaScript SDKs: the default file counts.
        variables = ["AWS_SHARED_CREDENTIALS_FILE": ""]
        findings = DefaultProfileCheck.findings(environment: { variables[$0] }, home: "/home/u", read: { files[$0] ?? .none })
        XCTAssertTrue(findings.map(\.path).contains("/home/u/.aws/credentials"), "\(findings)")
        // botocore expands variables in the path; the path as written counts too.
        variables = ["AWS_SHARED_CREDENTIALS_FILE": "${CREDS}/creds", "CREDS": "/srv"]
        findings = DefaultProfileCheck.findings(environment: { variables[$0] }, home: "/home/u", read: { files[$0] ?? .none })
        XCTAssertTrue(findings.map(\.path).contains("/srv/creds"), "\(findings)")
    }

    func testVariablesExpandAsPythonExpandsThem() {
        let environment = ["HOME": "/home/u", "A_1": "x"]
        let expand = { DefaultProfileCheck.expandingVariables($0, environment: { environment[$0] }) }
        XCTAssertEqual(expand("$HOME/.aws/${A_1}"), "/home/u/.aws/x")
        XCTAssertEqual(expand("$UNSET/a ${ALSO_UNSET} $ ${HOME"), "$UNSET/a ${ALSO_UNSET} $ ${HOME")
    }

    func testTheFailureNamesEachFileAndWhatToChangeButNoValue() {
        let findings = [
            DefaultProfileCheck.Finding(path: "/h/.aws/credentials", variable: "AWS_SHARED_CREDENTIALS_FILE", settings: ["aws_access_key_id"]),
            DefaultProfileCheck.Finding(path: "/h/.aws/config", variable: "AWS_CONFIG_FILE", settings: ["credential_process"]),
            DefaultProfileCheck.Finding(path: "/h/.boto", variable: nil, settings: ["aws_access_key_id"]),
        ]
        let failure = DefaultProfileCheck.failure(findings, session: "alice")
        XCTAssertEqual(failure.status, .usage)
        for part in ["/h/.aws/credentials (aws_access_key_id)", "/h/.aws/config (credential_process)", "/h/.boto (aws_access_key_id)",
                     "before those of session 'alice'", "AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_CONFIG_FILE=/dev/null with AWS_REGION and AWS_DEFAULT_REGION set",
                     "remove those settings", "nothing was run"] {
            XCTAssertTrue(failure.message.contains(part), "\(part) missing: \(failure.message)")
        }
        let botoOnly = DefaultProfileCheck.failure([findings[2]], session: "alice")
        XCTAssertFalse(botoOnly.message.contains("/dev/null"), botoOnly.message)
    }

    func testFilesTheCheckCannotReadCountAndDevicesDoNot() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("profile-check-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fifo = directory + "/fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        // Nobody writes to it: read, it would block, and its data is the command's.
        guard case .unchecked = DefaultProfileCheck.contents(ofFile: fifo) else { return XCTFail("a FIFO passed unchecked") }
        XCTAssertEqual(DefaultProfileCheck.contents(ofFile: directory), DefaultProfileCheck.Contents.none)
        XCTAssertEqual(DefaultProfileCheck.contents(ofFile: "/dev/null"), DefaultProfileCheck.Contents.none)
        XCTAssertEqual(DefaultProfileCheck.contents(ofFile: directory + "/missing"), DefaultProfileCheck.Contents.none)
        let file = directory + "/credentials"
        try Data("[default]\naws_access_key_id = x\n".utf8).write(to: URL(fileURLWithPath: file))
        XCTAssertEqual(DefaultProfileCheck.contents(ofFile: file), .text("[default]\naws_access_key_id = x\n"))
        // Followed, as the SDKs follow it.
        XCTAssertEqual(symlink(file, directory + "/link"), 0)
        XCTAssertEqual(DefaultProfileCheck.contents(ofFile: directory + "/link"), .text("[default]\naws_access_key_id = x\n"))
    }
}
