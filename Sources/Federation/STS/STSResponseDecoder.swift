package import SecureStorage

/// Reads STS's XML answers: a successful `AssumeRoleWithWebIdentity` and the
/// `ErrorResponse` of a failure. A body that cannot be read fails with
/// ``FederationError/Code/invalidResponse`` naming the element at fault, never a value.
package enum STSResponseDecoder {
    static let operation = "AssumeRoleWithWebIdentity"

    /// `AssumeRoleWithWebIdentityResponse/AssumeRoleWithWebIdentityResult/…`.
    package static func assumedRole(from body: [UInt8], redactor: SecretRedactor) throws(FederationError) -> AssumedRoleOutput {
        let root: XMLElementNode
        do {
            root = try XMLTreeReader.read(body)
        } catch {
            throw invalid("returned \(error.summary)", redactor: redactor)
        }
        let rootName = "AssumeRoleWithWebIdentityResponse"
        guard root.name == rootName else {
            throw invalid("returned the element '\(root.name.prefix(scalars: 64))' where '\(rootName)' belongs", redactor: redactor)
        }
        let resultPath = "\(rootName)/AssumeRoleWithWebIdentityResult"
        guard let result = root.child("AssumeRoleWithWebIdentityResult") else {
            throw missing(resultPath, redactor: redactor)
        }
        let credentialsPath = "\(resultPath)/Credentials"
        guard let credentials = result.child("Credentials") else { throw missing(credentialsPath, redactor: redactor) }
        func required(_ name: String) throws(FederationError) -> String {
            guard let value = credentials.child(name)?.trimmedText, !value.isEmpty else {
                throw missing("\(credentialsPath)/\(name)", redactor: redactor)
            }
            return value
        }
        let accessKeyId = try required("AccessKeyId")
        let secretAccessKey = try required("SecretAccessKey")
        let sessionToken = try required("SessionToken")
        let expirationText = try required("Expiration")
        guard let expiration = ISO8601Timestamp.parse(expirationText) else {
            throw invalid("returned a bad value in the element '\(credentialsPath)/Expiration' (not an ISO 8601 timestamp)", redactor: redactor)
        }
        let arn = result.child("AssumedRoleUser")?.child("Arn")?.trimmedText
        let subject = result.child("SubjectFromWebIdentityToken")?.trimmedText
        return AssumedRoleOutput(
            credentials: AWSCredentials(
                accessKeyId: accessKeyId, secretAccessKey: secretAccessKey, sessionToken: sessionToken, expiration: expiration),
            assumedRoleArn: arn.flatMap { $0.isEmpty ? nil : $0 },
            subject: subject.flatMap { $0.isEmpty ? nil : $0 }
        )
    }

    /// `ErrorResponse/Error/{Type,Code,Message}`, or `nil` when the body is not one.
    static func errorFields(from body: [UInt8]) -> (code: String?, message: String?)? {
        guard let root = try? XMLTreeReader.read(body), root.name == "ErrorResponse" || root.name == "Response" else { return nil }
        // STS sends ErrorResponse/Error; some AWS front ends send Response/Errors/Error.
        guard let error = root.child("Error") ?? root.child("Errors")?.child("Error") else { return nil }
        let code = error.child("Code")?.trimmedText
        let message = error.child("Message")?.text
        return (code.flatMap { $0.isEmpty ? nil : $0 }, message)
    }

    private static func missing(_ path: String, redactor: SecretRedactor) -> FederationError {
        invalid("returned a response without the element '\(path)'", redactor: redactor)
    }

    private static func invalid(_ what: String, redactor: SecretRedactor) -> FederationError {
        FederationError(code: .invalidResponse, message: redactor.redact("\(operation) \(what)"), operation: operation, httpStatus: 200)
    }
}
