@testable import FederateCLI
import XCTest

/// JVM options through which a Java or Kotlin SDK would take credentials before `exec`'s
/// endpoint: found by name, wherever they stand, and reported without their values.
final class JavaOptionsCheckTests: XCTestCase {
    func testCredentialPropertiesAreFoundWhereverTheyStand() {
        XCTAssertEqual(
            JavaOptionsCheck.properties(in: "-Xmx2g -Daws.accessKeyId=AKIAEXAMPLE -Daws.secretAccessKey=abc/def -Daws.region=eu-west-1"),
            ["-Daws.accessKeyId", "-Daws.secretAccessKey"])
        XCTAssertEqual(JavaOptionsCheck.properties(in: "\"-Daws.profile=admin\"\t'-Daws.containerCredentialsFullUri=http://h/'"),
                       ["-Daws.profile", "-Daws.containerCredentialsFullUri"])
        XCTAssertEqual(JavaOptionsCheck.properties(in: "-Daws.secretKey=x -Daws.secretKey=y -Daws.sessionToken"), ["-Daws.secretKey", "-Daws.sessionToken"])
        // The instance metadata service turned back on counts; turned off (as exec does) does not.
        XCTAssertEqual(JavaOptionsCheck.properties(in: "-Daws.disableEc2Metadata=false"), ["-Daws.disableEc2Metadata"])
        XCTAssertEqual(JavaOptionsCheck.properties(in: "-Daws.disableEc2Metadata=TRUE"), [])
        // HotSpot drops quotes anywhere in an option.
        XCTAssertEqual(JavaOptionsCheck.properties(in: "-D'aws.accessKeyId'=AK -Daws.\"sessionToken\"=t"), ["-Daws.accessKeyId", "-Daws.sessionToken"])
        XCTAssertEqual(JavaOptionsCheck.properties(in: "-Daws.disableEc2Metadata=\"true\""), [])
        for harmless in ["", "-Xmx2g", "-Daws.region=us-east-1 -Daws.maxAttempts=3", "-Daws.accessKeyIdX=1", "-Dfoo.aws.accessKeyId=1", "-Daws."] {
            XCTAssertEqual(JavaOptionsCheck.properties(in: harmless), [], harmless)
        }
    }

    /// Each property that gives a JVM SDK credentials counts alone (spelled out here: a name
    /// dropped from the check's own list must fail).
    func testEachCredentialPropertyCountsAlone() {
        let properties = [
            "aws.accessKeyId", "aws.secretAccessKey", "aws.secretKey", "aws.sessionToken", "aws.profile",
            "aws.sharedCredentialsFile", "aws.configFile", "aws.webIdentityTokenFile", "aws.roleArn", "aws.roleSessionName",
            "aws.containerCredentialsPath", "aws.containerCredentialsFullUri", "aws.containerAuthorizationToken",
            "aws.containerAuthorizationTokenFile",
        ]
        for name in properties {
            XCTAssertEqual(JavaOptionsCheck.properties(in: "-Xmx1g -D\(name)=x"), ["-D\(name)"], name)
        }
    }

    func testEachVariableTheJVMReadsIsLookedAt() {
        let environment = [
            "JAVA_TOOL_OPTIONS": "-Daws.accessKeyId=AK", "JDK_JAVA_OPTIONS": "-Daws.webIdentityTokenFile=/t",
            "_JAVA_OPTIONS": "-Daws.roleArn=arn", "JAVA_OPTS": "-Daws.configFile=/c", "MAVEN_OPTS": "-Daws.accessKeyId=AK",
        ]
        let findings = JavaOptionsCheck.findings(environment: { environment[$0] })
        XCTAssertEqual(findings.map(\.variable), ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS", "JAVA_OPTS"])
        XCTAssertEqual(findings.map(\.properties), [["-Daws.accessKeyId"], ["-Daws.webIdentityTokenFile"], ["-Daws.roleArn"], ["-Daws.configFile"]])
    }

    func testTheFailureNamesVariablesAndPropertiesButNoValue() {
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYJAVAOPTS"
        let findings = JavaOptionsCheck.findings(environment: { $0 == "JAVA_TOOL_OPTIONS" ? "-Daws.secretAccessKey=\(secret)" : nil })
        let failure = JavaOptionsCheck.failure(findings, session: "alice")
        XCTAssertEqual(failure.status, .usage)
        for part in ["$JAVA_TOOL_OPTIONS (-Daws.secretAccessKey)", "session 'alice'", "env -u JAVA_TOOL_OPTIONS", "nothing was run"] {
            XCTAssertTrue(failure.message.contains(part), "\(part) missing: \(failure.message)")
        }
        XCTAssertFalse(failure.message.contains(String(secret.prefix(16))), failure.message)
    }
}
