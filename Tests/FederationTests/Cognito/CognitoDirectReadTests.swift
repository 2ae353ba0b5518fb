@testable import Federation
import Foundation
import XCTest

/// The direct readers of Cognito's responses (`CognitoResponseBody.readDirectly`) against
/// `JSONDecoder`: the exact compact shape is read directly, and whatever is read directly,
/// even from mangled bodies, is what `JSONDecoder` reads.
final class CognitoDirectReadTests: XCTestCase {
    private let getId = #"{"IdentityId":"us-east-1:11111111-2222-4333-8444-555555555555"}"#
    private let credentials = #"{"Credentials":{"AccessKeyId":"ASIAQEXAMPLE000001","Expiration":1.522664214E9,"SecretKey":"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY","SessionToken":"AQoDYXdzEJr\/\/\/\/\/\/\/\/wEaoAK1wvxJY12r2IrDFT2IvAzTCn3zHoZ7YNtpiQLF0MqZye\u002bSg=="},"IdentityId":"us-east-1:abc"}"#

    private func key(_ output: GetCredentialsForIdentityOutput) -> [String] {
        [output.IdentityId ?? "-", output.Credentials.AccessKeyId, output.Credentials.SecretKey, output.Credentials.SessionToken,
         "\(output.Credentials.Expiration.date.timeIntervalSince1970)"]
    }

    private func decoded<T: Decodable>(_ type: T.Type, _ body: [UInt8]) -> T? {
        try? JSONDecoder().decode(T.self, from: Data(body))
    }

    func testTheShapeCognitoSendsIsReadDirectlyAsJSONDecoderReadsIt() throws {
        let id = try XCTUnwrap(GetIdOutput.readDirectly(Array(getId.utf8)))
        XCTAssertEqual(id.IdentityId, decoded(GetIdOutput.self, Array(getId.utf8))?.IdentityId)
        for body in [
            credentials,
            #"{"IdentityId":"i","Credentials":{"SessionToken":"t","SecretKey":"s","AccessKeyId":"a","Expiration":4102444800}}"#,
            #"{"Credentials":{"AccessKeyId":"a","SecretKey":"s","SessionToken":"t","Expiration":1700000000.5}}"#,
            #"{"Credentials":{"AccessKeyId":"\u00e9\ud83d\ude00","SecretKey":"s","SessionToken":"t","Expiration":17e8}}"#,
        ] {
            let direct = try XCTUnwrap(GetCredentialsForIdentityOutput.readDirectly(Array(body.utf8)), body)
            let reference = try XCTUnwrap(decoded(GetCredentialsForIdentityOutput.self, Array(body.utf8)), body)
            XCTAssertEqual(key(direct), key(reference), body)
        }
    }

    func testAnythingElseIsLeftToJSONDecoder() {
        let others = [
            #"{ "IdentityId":"x"}"#, #"{"IdentityId" :"x"}"#, #"{"IdentityId":""}"#, #"{"IdentityId":null}"#,
            #"{"IdentityId":"x","IdentityId":"y"}"#, #"{"IdentityId":"x","Extra":1}"#, #"{"IdentityId":"x"} "#,
            #"{"IdentityId":"x"}x"#, #"{"IdentityId":"\ud800"}"#, "{\"IdentityId\":\"a\u{1}b\"}", #"{"IdentityId":1}"#, "",
        ]
        for body in others {
            XCTAssertNil(GetIdOutput.readDirectly(Array(body.utf8)), body)
        }
        let credentialOthers = [
            #"{"Credentials":{"AccessKeyId":"a","SecretKey":"s","SessionToken":"t","Expiration":0}}"#,
            #"{"Credentials":{"AccessKeyId":"a","SecretKey":"s","SessionToken":"t","Expiration":1e11}}"#,
            #"{"Credentials":{"AccessKeyId":"a","SecretKey":"s","SessionToken":"t","Expiration":"1700000000"}}"#,
            #"{"Credentials":{"AccessKeyId":"a","SecretKey":"s","SessionToken":"t","Expiration":01}}"#,
            #"{"Credentials":{"AccessKeyId":"a","SecretKey":"s","SessionToken":"t"}}"#,
            #"{"Credentials":{"AccessKeyId":"","SecretKey":"s","SessionToken":"t","Expiration":1700000000}}"#,
            #"{"Credentials":{"AccessKeyId":"a","SecretKey":"s","SessionToken":"t","Expiration":1700000000},"IdentityId":""}"#,
            #"{"Credentials":null}"#, #"{}"#,
        ]
        for body in credentialOthers {
            XCTAssertNil(GetCredentialsForIdentityOutput.readDirectly(Array(body.utf8)), body)
        }
    }

    /// Mangled bodies (bytes changed, dropped, repeated): whenever the direct reader answers,
    /// `JSONDecoder` answers the same.
    func testWhateverIsReadDirectlyFromMangledBodiesJSONDecoderReadsTheSame() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array(#"{}[]":,\/ u0123456789eE.-+abcdefnulltrue"#.utf8) + [0x00, 0x1F, 0x80, 0xC3, 0xFF]
        var readDirectly = 0
        for seed in [Array(credentials.utf8), Array(getId.utf8)] {
            for _ in 0..<4000 {
                var body = seed
                for _ in 0..<Int.random(in: 1...3, using: &generator) {
                    let position = Int.random(in: 0..<body.count, using: &generator)
                    switch Int.random(in: 0..<4, using: &generator) {
                    case 0: body[position] = alphabet.randomElement(using: &generator)!
                    case 1: body.remove(at: position)
                    case 2: body.insert(alphabet.randomElement(using: &generator)!, at: position)
                    default:
                        let end = min(body.count, position + Int.random(in: 1...12, using: &generator))
                        body.insert(contentsOf: body[position..<end], at: position)
                    }
                    if body.isEmpty { body = [UInt8(ascii: "{")] }
                }
                let text = String(decoding: body, as: UTF8.self)
                if let direct = GetCredentialsForIdentityOutput.readDirectly(body) {
                    readDirectly += 1
                    guard let reference = decoded(GetCredentialsForIdentityOutput.self, body) else {
                        return XCTFail("read directly, refused by JSONDecoder: \(text)")
                    }
                    XCTAssertEqual(key(direct), key(reference), text)
                }
                if let direct = GetIdOutput.readDirectly(body) {
                    readDirectly += 1
                    XCTAssertEqual(direct.IdentityId, decoded(GetIdOutput.self, body)?.IdentityId, text)
                }
            }
        }
        XCTAssertGreaterThan(readDirectly, 0, "no mangled body was read directly: the comparison compared nothing")
    }
}
