// urlsession-bench: the Cognito federation a Swift user would write by hand with
// URLSession and JSONDecoder, for Benchmarks/compare.sh. Each federation is GetId, then
// GetCredentialsForIdentity with the returned identity ID, both decoded into Codable types.
//
//   urlsession-bench --endpoint URL --federations N --concurrency C
//
// The last line is federations per second.

import ArgumentParser
import ClosedLoop
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

struct GetIdRequest: Encodable {
    var IdentityPoolId: String
    var Logins: [String: String]
}

struct GetIdResponse: Decodable {
    var IdentityId: String
}

struct GetCredentialsRequest: Encodable {
    var IdentityId: String
    var Logins: [String: String]
}

struct GetCredentialsResponse: Decodable {
    struct Credentials: Decodable {
        var AccessKeyId: String
        var SecretKey: String
        var SessionToken: String
        var Expiration: Date
    }
    var IdentityId: String
    var Credentials: Credentials
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
}

final class CognitoCaller: Sendable {
    let endpoint: URL
    let session: URLSession

    init(endpoint: URL, maxConnections: Int) {
        self.endpoint = endpoint
        let configuration = URLSessionConfiguration.default
        configuration.httpMaximumConnectionsPerHost = maxConnections
        session = URLSession(configuration: configuration)
    }

    func call<Input: Encodable, Output: Decodable>(_ target: String, _ input: Input) async throws -> Output {
        var request = URLRequest(url: endpoint)
        request.httpMethod = "POST"
        request.setValue("application/x-amz-json-1.1", forHTTPHeaderField: "Content-Type")
        request.setValue("AWSCognitoIdentityService.\(target)", forHTTPHeaderField: "X-Amz-Target")
        request.httpBody = try JSONEncoder().encode(input)
        let (data, response) = try await session.data(for: request)
        guard let http = response as? HTTPURLResponse, http.statusCode == 200 else {
            throw BenchError(description: "\(target) failed: \(response)")
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .secondsSince1970
        return try decoder.decode(Output.self, from: data)
    }

    func federate(poolId: String, token: String) async throws -> GetCredentialsResponse {
        let logins = ["graph.facebook.com": token]
        let id: GetIdResponse = try await call("GetId", GetIdRequest(IdentityPoolId: poolId, Logins: logins))
        return try await call("GetCredentialsForIdentity", GetCredentialsRequest(IdentityId: id.IdentityId, Logins: logins))
    }
}

@main
struct URLSessionBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "urlsession-bench", abstract: "Federations per second with URLSession + JSONDecoder.")

    @Option(help: "The canned Cognito endpoint, e.g. http://127.0.0.1:8080/") var endpoint: String
    @Option(help: "Federations to time.") var federations = 10_000
    @Option(help: "Federations in flight at once.") var concurrency = 1
    @Option(help: "Untimed federations first.") var warmup = 200

    func run() async throws {
        guard let url = URL(string: endpoint) else { throw ValidationError("not a URL: \(endpoint)") }
        let caller = CognitoCaller(endpoint: url, maxConnections: max(1, concurrency))
        try await Self.federateAll(caller, count: warmup, concurrency: concurrency)
        let start = ContinuousClock.now
        try await Self.federateAll(caller, count: federations, concurrency: concurrency)
        let elapsed = start.duration(to: .now)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print("\(federations) federations at concurrency \(concurrency) in \(String(format: "%.3f", seconds)) s")
        print(String(format: "%.1f", Double(federations) / seconds))
    }

    static func federateAll(_ caller: CognitoCaller, count: Int, concurrency: Int) async throws {
        let poolId = "us-east-1:00000000-0000-4000-8000-000000000000"
        let token = "EAAGm0PX4ZCpsBAKZCZBbench0token0opaque0value0ZD"
        // The same closed loop of callers as broker-bench's.
        try await forEachIndex(count: count, concurrency: concurrency) { _ in
            _ = try await caller.federate(poolId: poolId, token: token)
        }
    }
}
