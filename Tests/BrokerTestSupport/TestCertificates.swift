import Foundation

/// A certificate authority made for one test and a certificate it signed for `127.0.0.1`
/// (an IP address SAN), as PEM files in a temporary directory; made by Python's
/// `cryptography`, which moto depends on. No system store trusts the authority.
public struct TestCertificates: Sendable {
    /// The directory holding the files; ``remove()`` deletes it.
    public let directory: String
    /// The authority's certificate: trust it to reach a server using ``certificateFile``.
    public var authorityFile: String { "\(directory)/ca.pem" }
    /// The server's certificate, for 127.0.0.1, signed by the authority.
    public var certificateFile: String { "\(directory)/server.pem" }
    /// The server certificate's private key (unencrypted).
    public var keyFile: String { "\(directory)/server.key" }

    /// Makes a new authority and server certificate (valid from 5 minutes ago for a day).
    public static func make(file: StaticString = #filePath, line: UInt = #line) throws -> TestCertificates {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("broker-tls-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, directory]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        do {
            try process.run()
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw missingPrerequisite("python3 could not be started (\(error))", file: file, line: line)
        }
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            try? FileManager.default.removeItem(atPath: directory)
            throw missingPrerequisite(
                "Python's cryptography could not make test certificates (pip install \"moto[server]\" brings it): \(text.suffix(400))",
                file: file, line: line)
        }
        return TestCertificates(directory: directory)
    }

    /// Deletes the files.
    public func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static let script = """
        import datetime, ipaddress, sys
        from cryptography import x509
        from cryptography.x509.oid import NameOID, ExtendedKeyUsageOID
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        directory = sys.argv[1]
        now = datetime.datetime.now(datetime.timezone.utc)
        def name(common):
            return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])
        def builder(subject, issuer, key):
            return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1)))
        authority_key = ec.generate_private_key(ec.SECP256R1())
        # A name of its own: OpenSSL finds an issuer by its name, and two test authorities of one
        # name would stand in for each other in a lookup.
        authority_name = name("IdentityBroker test authority " + directory.rsplit("/", 1)[-1])
        authority = (builder(authority_name, authority_name, authority_key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(authority_key.public_key()), critical=False)
            .sign(authority_key, hashes.SHA256()))
        server_key = ec.generate_private_key(ec.SECP256R1())
        server = (builder(name("127.0.0.1"), authority.subject, server_key)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(authority_key.public_key()), critical=False)
            .sign(authority_key, hashes.SHA256()))
        with open(directory + "/ca.pem", "wb") as out:
            out.write(authority.public_bytes(serialization.Encoding.PEM))
        with open(directory + "/server.pem", "wb") as out:
            out.write(server.public_bytes(serialization.Encoding.PEM))
        with open(directory + "/server.key", "wb") as out:
            out.write(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption()))
        """
}
