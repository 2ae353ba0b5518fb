@testable import FederateCLI
import Foundation
import XCTest

/// Which default profiles in the AWS shared files `exec` treats as taking precedence over
/// its endpoint, as botocore and the other SDKs read those files.
final class DefaultProfileCheckTests: XCTestCase {
    private func settings(_ text: String, config: Bool = false) -> [String] {
        DefaultProfileCheck.defaultProfileSettings(text, isConfig: config)
    }

    func testTheDefaultSectionsSettingsAreRead() {
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
              role_arn = nested, not a setting
            [after]
            credential_process = /bin/true
            """
        XCTAssertEqual(settings(text), ["aws_access_key_id", "aws_secret_access_key", "region", "s3"])
    }

    func testProfileDefaultCountsInTheConfigFileOnly() {
        let text = "[profile default]\ncredential_process = /usr/bin/helper\n"
        XCTAssertEqual(settings(text, config: true), ["credential_process"])
        XCTAssertEqual(settings(text, config: false), [])
        XCTAssertEqual(settings("[ profile   default ]\r\nsso_session = corp\r\n", config: true), ["sso_session"])
        XCTAssertEqual(settings("[defaults]\naws_access_key_id = x\n[profile defaultish]\nrole_arn = x\n", config: true), [])
    }

    func testOnlyCredentialSettingsMakeAFinding() {
        let files = [
            "/home/u/.aws/credentials": "[default]\naws_access_key_id = AKIA\naws_secret_access_key = s\n",
            "/home/u/.aws/config": "[default]\nregion = us-east-1\noutput = json\n",
        ]
        let findings = DefaultProfileCheck.findings(environment: { _ in nil }, home: "/home/u", read: { files[$0] })
        XCTAssertEqual(findings, [.init(path: "/home/u/.aws/credentials", variable: "AWS_SHARED_CREDENTIALS_FILE", settings: ["aws_access_key_id", "aws_secret_access_key"])])
    }

    func testTheVariablesNameTheFilesAndDevNullNamesNone() {
        let files = [
            "/srv/creds": "[default]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = base\n",
            "/home/u/cfg": "[profile default]\nweb_identity_token_file = /t\nrole_arn = arn\n",
            "/dev/null": "",
        ]
        var variables = ["AWS_SHARED_CREDENTIALS_FILE": "/srv/creds", "AWS_CONFIG_FILE": "~/cfg"]
        var findings = DefaultProfileCheck.findings(environment: { variables[$0] }, home: "/home/u", read: { files[$0] })
        XCTAssertEqual(findings.map(\.path), ["/srv/creds", "/home/u/cfg"])
        XCTAssertEqual(findings.last?.settings, ["web_identity_token_file", "role_arn"])

        variables = ["AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_CONFIG_FILE": "/dev/null"]
        findings = DefaultProfileCheck.findings(environment: { variables[$0] }, home: "/home/u", read: { files[$0] })
        XCTAssertEqual(findings, [])
        // An empty variable names no file; no home and no variable neither.
        variables = ["AWS_SHARED_CREDENTIALS_FILE": "", "AWS_CONFIG_FILE": ""]
        XCTAssertEqual(DefaultProfileCheck.findings(environment: { variables[$0] }, home: "/srv", read: { _ in "[default]\ncredential_process=x\n" }), [])
        XCTAssertEqual(DefaultProfileCheck.findings(environment: { _ in nil }, home: nil, read: { _ in "[default]\ncredential_process=x\n" }), [])
    }

    func testTheFailureNamesEachFileAndItsVariableButNoValue() {
        let findings = [
            DefaultProfileCheck.Finding(path: "/h/.aws/credentials", variable: "AWS_SHARED_CREDENTIALS_FILE", settings: ["aws_access_key_id"]),
            DefaultProfileCheck.Finding(path: "/h/.aws/config", variable: "AWS_CONFIG_FILE", settings: ["credential_process"]),
        ]
        let failure = DefaultProfileCheck.failure(findings, session: "alice")
        XCTAssertEqual(failure.status, .usage)
        for part in ["/h/.aws/credentials (aws_access_key_id)", "/h/.aws/config (credential_process)", "session 'alice'",
                     "AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_CONFIG_FILE=/dev/null with AWS_REGION set", "nothing was run"] {
            XCTAssertTrue(failure.message.contains(part), "\(part) missing: \(failure.message)")
        }
    }

    func testFilesThatAreNotRegularAreNotRead() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("profile-check-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fifo = directory + "/fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        // Nobody writes to it: read, it would block.
        XCTAssertNil(DefaultProfileCheck.contents(ofFile: fifo))
        XCTAssertNil(DefaultProfileCheck.contents(ofFile: directory))
        XCTAssertNil(DefaultProfileCheck.contents(ofFile: directory + "/missing"))
        let file = directory + "/credentials"
        try Data("[default]\naws_access_key_id = x\n".utf8).write(to: URL(fileURLWithPath: file))
        XCTAssertEqual(DefaultProfileCheck.contents(ofFile: file), "[default]\naws_access_key_id = x\n")
    }
}
