import BrokerTestSupport
import Foundation
import InMemoryLogging
import Logging
import PostgresNIO
@testable import PostgresKeystore
import SecureStorage
import XCTest

/// The engine's contract against a real PostgreSQL: the same semantics as the SQLite engine.
final class PostgresKeystoreTests: PostgresTestCase, @unchecked Sendable {
    func testThePostgresKeystoreTellsKeysApartByTheirBytes() async throws {
        try await assertCanonicallyEquivalentKeysAreTwoItems(try await keystore())
    }

    func testRefusesWhatNoEngineStores() async throws {
        try await assertRefusesWhatNoEngineStores(try await keystore())
    }

    func testThePostgresKeystoreClosesThroughTheProtocol() async throws {
        try await assertClosingThroughTheProtocol(try await keystore())
    }

    func testRoundTripKeysSortedAndRemove() async throws {
        let keystore = try await keystore()
        let missing = try await keystore.value(forKey: "absent")
        XCTAssertNil(missing, "absence is not an error")
        try await keystore.set(Array("bravo value".utf8), forKey: "b")
        try await keystore.set(Array("alpha value".utf8), forKey: "a")
        try await keystore.set([], forKey: "empty")
        let a = try await keystore.value(forKey: "a")
        XCTAssertEqual(a, Array("alpha value".utf8))
        let empty = try await keystore.value(forKey: "empty")
        XCTAssertEqual(empty, [])
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, ["a", "b", "empty"])
        try await keystore.remove(forKey: "a")
        try await keystore.remove(forKey: "never-there")
        let afterRemove = try await keystore.keys()
        XCTAssertEqual(afterRemove, ["b", "empty"])

        // Another instance (another host) reads the same items.
        let other = try await self.keystore()
        let b = try await other.value(forKey: "b")
        XCTAssertEqual(b, Array("bravo value".utf8))
    }

    func testNamespacesAreSeparateColumns() async throws {
        let plain = try await keystore(service: "tool")
        let grouped = try await keystore(service: "tool", group: AccessGroup(name: "team"))
        let otherService = try await keystore(service: "other")
        try await plain.set([1], forKey: "k")
        try await grouped.set([2], forKey: "k")
        let fromGroup = try await grouped.value(forKey: "k")
        XCTAssertEqual(fromGroup, [2])
        let fromOther = try await otherService.value(forKey: "k")
        XCTAssertNil(fromOther)
        let rows = try server.psql(
            "SELECT service || '/' || access_group || '/' || key FROM identity_broker_items WHERE service <> '' ORDER BY 1", database: database)
        XCTAssertEqual(rows.split(separator: "\n").map(String.init), ["tool//k", "tool/team/k"])
    }

    func testVersionedSetsConvergeOnTheHighestVersionWhateverTheOrder() async throws {
        let first = try await keystore()
        let second = try await keystore()
        let appliedHigh = try await first.set([2], forKey: "v", version: 2)
        let appliedLow = try await second.set([1], forKey: "v", version: 1)
        XCTAssertTrue(appliedHigh)
        XCTAssertFalse(appliedLow, "a lower version loses")
        let equal = try await second.set([3], forKey: "v", version: 2)
        XCTAssertTrue(equal, "an equal version applies")

        // Racing writers on two instances: the highest version wins whatever the order.
        for round in 0..<5 {
            let key = "race\(round)"
            try await withThrowingTaskGroup(of: Void.self) { group in
                for version in (1...20).shuffled() {
                    let writer = version % 2 == 0 ? first : second
                    group.addTask { try await writer.set([UInt8(version)], forKey: key, version: Int64(version)) }
                }
                try await group.waitForAll()
            }
            let stored = try await first.value(forKey: key)
            XCTAssertEqual(stored, [20], "round \(round)")
        }
        // An unversioned set always applies; a versioned one then applies over it.
        try await first.set([9], forKey: "v")
        let overUnversioned = try await second.set([10], forKey: "v", version: 1)
        XCTAssertTrue(overUnversioned)
    }

    func testABatchIsAtomic() async throws {
        let keystore = try await keystore()
        try await keystore.set([0], forKey: "existing")
        // A trigger refuses one key inside the transaction, after earlier operations ran.
        try server.psql("""
            CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF NEW.key = 'poison' THEN RAISE EXCEPTION 'poisoned'; END IF; RETURN NEW; END $$;
            CREATE TRIGGER refuse_poison BEFORE INSERT OR UPDATE ON identity_broker_items
            FOR EACH ROW EXECUTE FUNCTION refuse_poison();
            """, database: database)
        var batch = KeystoreBatch()
        batch.set([1], forKey: "a")
        batch.remove(forKey: "existing")
        batch.set([2], forKey: "poison")
        let error = await keystoreError { try await keystore.commit(batch) }
        XCTAssertEqual(error?.code, .io, "\(String(describing: error))")
        XCTAssertTrue(error?.reason.contains("poisoned") ?? false, "\(String(describing: error))")
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, ["existing"], "nothing of the failed batch was applied")

        var good = KeystoreBatch()
        good.set([1], forKey: "a")
        good.set([2], forKey: "a", version: 5)
        good.remove(forKey: "existing")
        good.remove(forKey: "missing")
        let applied = try await keystore.commit(good)
        XCTAssertEqual(applied, [true, true, true, false])
        let a = try await keystore.value(forKey: "a")
        XCTAssertEqual(a, [2], "later operations see earlier ones")

        var invalid = KeystoreBatch()
        invalid.set([1], forKey: "fine")
        invalid.set([1], forKey: "")
        let invalidError = await keystoreError { try await keystore.commit(invalid) }
        XCTAssertEqual(invalidError?.code, .invalidName)
        let fine = try await keystore.value(forKey: "fine")
        XCTAssertNil(fine)
    }

    func testADamagedRowIsAnErrorForThatKeyAlone() async throws {
        let keystore = try await keystore()
        try await keystore.set(Array("good".utf8), forKey: "good")
        try await keystore.set(Array("to be damaged".utf8), forKey: "bad")
        try await keystore.set(Array("short".utf8), forKey: "short")
        // Flip one ciphertext byte; truncate another row below the sealed overhead.
        try server.psql("""
            UPDATE identity_broker_items SET value = set_byte(value, 20, get_byte(value, 20) # 1) WHERE key = 'bad';
            UPDATE identity_broker_items SET value = '\\x0102'::bytea WHERE key = 'short';
            """, database: database)
        let bad = await keystoreError { try await keystore.value(forKey: "bad") }
        XCTAssertEqual(bad?.code, .authenticationFailed)
        XCTAssertTrue(bad?.reason.contains("'bad'") ?? false, "the error names the key: \(String(describing: bad))")
        let short = await keystoreError { try await keystore.value(forKey: "short") }
        XCTAssertEqual(short?.code, .corruptFormat)
        let good = try await keystore.value(forKey: "good")
        XCTAssertEqual(good, Array("good".utf8))
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, ["bad", "good", "short"])
        try await keystore.remove(forKey: "bad")
        let afterRemove = try await keystore.keys()
        XCTAssertEqual(afterRemove, ["good", "short"], "a damaged item can still be removed")
    }

    /// A role that may write the items table can store values up to PostgreSQL's 1 GB and keys
    /// as long: the server never sends a value over the sealed-item limit (that item alone
    /// reads as damaged) and `keys()` leaves out keys no item can have. Nor can the keystore
    /// write a value over the limit.
    func testOversizedValuesAndKeysAnotherRoleWroteAreNotRead() async throws {
        let proxy = try FreezableTCPProxy(targetPort: UInt16(server.port))
        defer { proxy.stop() }
        let keystore = try await keystore { $0.port = Int(proxy.port) }
        try await keystore.set(Array("good".utf8), forKey: "good")
        try await keystore.set(Array("to be replaced".utf8), forKey: "big")
        let longKey = String(repeating: "k", count: 4096)
        try server.psql("""
            UPDATE identity_broker_items SET value = value || decode(repeat('00', 4 * 1024 * 1024), 'hex') WHERE key = 'big';
            INSERT INTO identity_broker_items (service, access_group, key, version, value)
                SELECT service, access_group, '\(longKey)', version, value FROM identity_broker_items WHERE key = 'good';
            """, database: database)

        let before = proxy.bytesFromTarget
        let big = await keystoreError { try await keystore.value(forKey: "big") }
        XCTAssertEqual(big?.code, .corruptFormat, String(describing: big))
        XCTAssertTrue(big?.reason.contains("'big'") ?? false, "the error names the key: \(String(describing: big))")
        // Reads at once are combined into one statement (`ReadMany`), capped the same way.
        let readers = Array(Array(repeating: ["big", "good"], count: 8).joined())
        let together = await readAtOnce(readers, from: keystore)
        for (index, key) in readers.enumerated() {
            switch (key, together[index]) {
            case ("good", .success(let value)?): XCTAssertEqual(value, Array("good".utf8))
            case ("big", .failure(let error)?): XCTAssertEqual(error.code, .corruptFormat, "\(error)")
            default: XCTFail("\(key): \(String(describing: together[index]))")
            }
        }
        XCTAssertLessThan(proxy.bytesFromTarget - before, 1 << 20, "the server sent the oversized value")
        let good = try await keystore.value(forKey: "good")
        XCTAssertEqual(good, Array("good".utf8))
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, ["big", "good"], "a key no item can have was listed")

        let tooLarge = await keystoreError { try await keystore.set([UInt8](repeating: 1, count: 1 << 20), forKey: "huge") }
        XCTAssertEqual(tooLarge?.code, .valueTooLarge, String(describing: tooLarge))
        let stillThere = try await keystore.keys()
        XCTAssertEqual(stillThere, ["big", "good"])
    }

    /// Creating the tables is said once, naming the schema: a role whose search_path stopped
    /// leading to its tables gets new, empty ones wherever the path now leads, and every saved
    /// session seemed gone without a line in any log.
    func testCreatingTheTablesIsSaidOnceNamingTheSchema() async throws {
        func notices() async throws -> [String] {
            let logs = InMemoryLogHandler()
            _ = try await keystore(logger: Logger(label: "schema") { _ in logs })
            return logs.entries.filter { $0.level == .notice }.map(\.message.description)
        }
        let first = try await notices()
        XCTAssertEqual(first.count, 1, "\(first)")
        XCTAssertTrue(first.first?.contains("created the keystore's tables in schema public") ?? false, "\(first)")
        let again = try await notices()
        XCTAssertEqual(again, [], "tables found are not created")
        try server.psql("""
            CREATE SCHEMA moved AUTHORIZATION \(server.passwordRole);
            ALTER ROLE \(server.passwordRole) IN DATABASE \(database!) SET search_path = moved;
            """, database: database)
        let drifted = try await notices()
        XCTAssertEqual(drifted.count, 1, "\(drifted)")
        XCTAssertTrue(drifted.first?.contains("in schema moved") ?? false, "\(drifted)")
    }

    /// Plaintext (or TLS an attacker can strip, `prefer`) to a host that is not this machine
    /// is warned of at open, once; to a loopback address, or with TLS required, nothing is.
    /// `127.1` is this machine (the resolver reads it as 127.0.0.1), but not a spelling the
    /// check recognises, so it stands in for another host here without leaving loopback.
    func testAnUnprotectedConnectionToAnotherHostIsWarnedOfAtOpen() async throws {
        func warnings(host: String) async throws -> [String] {
            let logs = InMemoryLogHandler()
            let opened = try await keystore(logger: Logger(label: "tls") { _ in logs }) { $0.host = host }
            try await opened.set([1], forKey: "k")
            return logs.entries.filter { $0.level == .warning }.map(\.message.description)
        }
        let remote = try await warnings(host: "127.1")
        XCTAssertEqual(remote.count, 1, "\(remote)")
        XCTAssertTrue(remote.first?.contains("not protected by TLS (sslmode=disable)") ?? false, "\(remote)")
        let local = try await warnings(host: "127.0.0.1")
        XCTAssertEqual(local, [])

        for (url, warns) in [
            ("postgres://u@db.example.com/x?sslmode=disable", true), ("postgres://u@db.example.com/x?sslmode=prefer", true),
            ("postgres://u@db.example.com/x", false),
            ("postgres://u@db.example.com/x?sslmode=require", false), ("postgres://u@db.example.com/x?sslmode=verify-full", false),
            ("postgres://u@localhost/x", false), ("postgres://u@[::1]/x", false), ("postgres://u@127.0.0.2/x", false),
            ("postgres://u@[::ffff:127.0.0.1]/x", false), ("postgres://u@[::ffff:10.0.0.1]/x?sslmode=disable", true),
            ("postgres://u@127.0.0.1/x?sslmode=disable", false),
        ] {
            let configuration = try PostgresKeystore.Configuration(url: url)
            XCTAssertEqual(configuration.unprotectedTransportWarning != nil, warns, url)
        }
    }

    /// An instance with another key is refused when it opens, before it can overwrite an
    /// item the fleet can open: by the service's key check in its group, or, where the
    /// service's items predate the check, by those items (and then it stores no check).
    /// Another tool in the same group may use a key of its own.
    func testAWrongKeyIsRefusedWhenItOpens() async throws {
        let otherKey = [UInt8](repeating: 8, count: 32)
        let writer = try await keystore()
        try await writer.set(Array("secret".utf8), forKey: "k")
        let checks = try server.psqlValue("SELECT string_agg(key, ',') FROM identity_broker_items WHERE service = ''", database: database)
        XCTAssertEqual(checks, "tool", "the first open stored the service's key check")

        let refused = await keystoreError { try await self.keystore(keySource: .raw(otherKey)) }
        XCTAssertEqual(refused?.code, .invalidKey)
        XCTAssertTrue(refused?.reason.contains("key check") ?? false, "\(String(describing: refused))")
        let otherTool = try await keystore(service: "other-tool", keySource: .raw(otherKey))
        try await otherTool.set([1], forKey: "k")
        let both = try server.psqlValue("SELECT string_agg(key, ',' ORDER BY key) FROM identity_broker_items WHERE service = ''", database: database)
        XCTAssertEqual(both, "other-tool,tool", "each service has its own check, and its own key")

        // Items written before the check existed.
        try server.psql("DELETE FROM identity_broker_items WHERE service = '' AND key = 'tool'", database: database)
        let unchecked = await keystoreError { try await self.keystore(keySource: .raw(otherKey)) }
        XCTAssertEqual(unchecked?.code, .invalidKey)
        XCTAssertTrue(unchecked?.reason.contains("opens none of the first 1 items") ?? false, "\(String(describing: unchecked))")
        let claimed = try server.psqlValue("SELECT count(*) FROM identity_broker_items WHERE service = '' AND key = 'tool'", database: database)
        XCTAssertEqual(claimed, "0", "a refused key stores no check")

        let reader = try await keystore()
        let value = try await reader.value(forKey: "k")
        XCTAssertEqual(value, Array("secret".utf8))
        let keys = try await reader.keys()
        XCTAssertEqual(keys, ["k"], "check rows are no item of any keystore")
        let restored = try server.psqlValue("SELECT count(*) FROM identity_broker_items WHERE service = '' AND key = 'tool'", database: database)
        XCTAssertEqual(restored, "1", "the right key stores the check")
    }

    /// An item sealed with another key that reached the table anyway (written before the
    /// check existed, or copied in) fails to open alone.
    func testAnItemSealedWithAnotherKeyFailsToOpen() async throws {
        let writer = try await keystore()
        try await writer.set(Array("secret".utf8), forKey: "k")
        let foreign = try await keystore(group: AccessGroup(name: "elsewhere"), keySource: .raw([UInt8](repeating: 8, count: 32)))
        try await foreign.set(Array("foreign".utf8), forKey: "f")
        try server.psql("""
            UPDATE identity_broker_items SET access_group = '' WHERE access_group = 'elsewhere' AND key = 'f'
            """, database: database)
        let error = await keystoreError { try await writer.value(forKey: "f") }
        XCTAssertEqual(error?.code, .authenticationFailed)
        let keys = try await writer.keys()
        XCTAssertEqual(keys, ["f", "k"], "listing needs no key")
    }

    func testCiphertextMovedToAnotherKeyServiceOrGroupFailsToOpen() async throws {
        let plain = try await keystore(service: "tool")
        let grouped = try await keystore(service: "tool", group: AccessGroup(name: "team"))
        let otherService = try await keystore(service: "other")
        try await plain.set(Array("alice's session".utf8), forKey: "alice")
        try await plain.set(Array("bob's session".utf8), forKey: "bob")
        try await grouped.set([0], forKey: "alice")
        try await otherService.set([0], forKey: "alice")
        let source = "(SELECT value FROM identity_broker_items WHERE service = 'tool' AND access_group = '' AND key = 'alice')"
        try server.psql("""
            UPDATE identity_broker_items SET value = \(source) WHERE service = 'tool' AND access_group = '' AND key = 'bob';
            UPDATE identity_broker_items SET value = \(source) WHERE service = 'tool' AND access_group = 'team' AND key = 'alice';
            UPDATE identity_broker_items SET value = \(source) WHERE service = 'other' AND key = 'alice';
            """, database: database)
        for (keystore, key) in [(plain, "bob"), (grouped, "alice"), (otherService, "alice")] {
            let error = await keystoreError { try await keystore.value(forKey: key) }
            XCTAssertEqual(error?.code, .authenticationFailed, "\(keystore.service)/\(keystore.accessGroup)/\(key)")
        }
        let original = try await plain.value(forKey: "alice")
        XCTAssertEqual(original, Array("alice's session".utf8))
    }

    func testNamesAreValidated() async throws {
        let error = await keystoreError { try await self.keystore(service: "") }
        XCTAssertEqual(error?.code, .invalidName)
        let keystore = try await keystore()
        let long = await keystoreError { try await keystore.value(forKey: String(repeating: "k", count: 181)) }
        XCTAssertEqual(long?.code, .invalidName)
        let nul = await keystoreError { try await keystore.set([1], forKey: "a\u{0}b") }
        XCTAssertEqual(nul?.code, .invalidName)
    }

    func testSchemaIsCreatedOnceByConcurrentFirstStartsAndVersioned() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<6 {
                group.addTask { try await self.keystore(service: "tool\(index)").set([1], forKey: "k") }
            }
            try await group.waitForAll()
        }
        let version = try server.psqlValue("SELECT version FROM identity_broker_schema", database: database)
        XCTAssertEqual(version, String(PostgresSchema.version))
        try server.psql("UPDATE identity_broker_schema SET version = 99", database: database)
        let error = await keystoreError { try await self.keystore() }
        XCTAssertEqual(error?.code, .corruptFormat)
        XCTAssertTrue(error?.reason.contains("99") ?? false)
    }

    /// Once an owner has created the tables, a role with only `SELECT`, `INSERT`, `UPDATE`
    /// and `DELETE` on them (no `CREATE` on the schema, PostgreSQL 15's default for a role
    /// that does not own the database) opens keystores, reads, writes, keeps a passphrase's
    /// salt and migrates. `CREATE TABLE IF NOT EXISTS` at every open refused it.
    func testARoleWithOnlyTableRightsUsesTablesAnOwnerCreated() async throws {
        let owner = try await keystore()
        try await owner.set(Array("from the owner".utf8), forKey: "session.alice")
        let role = "dml_\(database!)"
        try server.psql("""
            CREATE ROLE \(role) LOGIN;
            GRANT CONNECT ON DATABASE \(database!) TO \(role);
            GRANT SELECT, INSERT, UPDATE, DELETE ON identity_broker_schema, identity_broker_items, identity_broker_key_salts TO \(role);
            """, database: database)
        let canCreate = try server.psqlValue("SELECT has_schema_privilege('\(role)', 'public', 'CREATE')", database: database)
        XCTAssertEqual(canCreate, "f", "the role cannot create tables")
        var configuration = try configuration(withPassword: false)
        configuration.username = role

        // A database an earlier release created has no commit procedure: the owner's next open
        // adds it; the role, which may not, is told why it cannot open.
        try server.psql("DROP PROCEDURE \(PostgresSchema.commitProcedure)", database: database)
        let refused = await keystoreError {
            try await PostgresKeystore(configuration: configuration, service: "tool", keySource: .raw(self.key))
        }
        XCTAssertEqual(refused?.code, .io, "\(String(describing: refused))")
        XCTAssertTrue(refused?.reason.contains("42501") ?? false, "\(String(describing: refused))")
        XCTAssertTrue(refused?.reason.contains("such as its owner") ?? false, "\(String(describing: refused))")
        _ = try await keystore()
        let added = try server.psqlValue(
            "SELECT to_regprocedure('\(PostgresSchema.commitProcedureSignature)') IS NOT NULL", database: database)
        XCTAssertEqual(added, "t", "the owner added the procedure")

        // A database that revokes EXECUTE from PUBLIC: the open fails, rather than every commit.
        try server.psql("REVOKE EXECUTE ON PROCEDURE \(PostgresSchema.commitProcedure) FROM PUBLIC", database: database)
        let uncallable = await keystoreError {
            try await PostgresKeystore(configuration: configuration, service: "tool", keySource: .raw(self.key))
        }
        XCTAssertEqual(uncallable?.code, .io, "\(String(describing: uncallable))")
        XCTAssertTrue(uncallable?.reason.contains("GRANT EXECUTE") ?? false, "\(String(describing: uncallable))")
        try server.psql("GRANT EXECUTE ON PROCEDURE \(PostgresSchema.commitProcedure) TO \(role)", database: database)

        let keystore = try await PostgresKeystore(configuration: configuration, service: "tool", keySource: .raw(key))
        let read = try await keystore.value(forKey: "session.alice")
        XCTAssertEqual(read, Array("from the owner".utf8))
        try await keystore.set([1], forKey: "session.bob")
        try await keystore.remove(forKey: "session.alice")
        let keys = try await keystore.keys()
        XCTAssertEqual(keys, ["session.bob"])
        await keystore.close()

        let team = try await PostgresKeystore(
            configuration: configuration, service: "tool", accessGroup: AccessGroup(name: "team"), keySource: .passphrase("correct horse"))
        try await team.set([2], forKey: "session.carol")
        await team.close()
        let salts = try server.psqlValue("SELECT count(*) FROM identity_broker_key_salts WHERE access_group = 'team'", database: database)
        XCTAssertEqual(salts, "1", "the role stored the passphrase's salt")

        let moved = try await PostgresKeystore.migrate(
            configuration: configuration, service: "tool", from: .none, to: AccessGroup(name: "ops"), keySource: .raw(key))
        XCTAssertEqual(moved, 1)

        // Given CREATE on the schema (anyone's before PostgreSQL 15), the role adds the
        // procedure itself, and calls it: one of its own is no plant.
        try server.psql("""
            DROP PROCEDURE \(PostgresSchema.commitProcedure);
            GRANT CREATE ON SCHEMA public TO \(role);
            """, database: database)
        let creator = try await PostgresKeystore(configuration: configuration, service: "tool", keySource: .raw(key))
        try await creator.set([3], forKey: "session.dave")
        let dave = try await creator.value(forKey: "session.dave")
        XCTAssertEqual(dave, [3])
        await creator.close()
        let procedureOwner = try server.psqlValue(
            "SELECT pg_get_userbyid(proowner) FROM pg_proc WHERE oid = to_regprocedure('\(PostgresSchema.commitProcedureSignature)')",
            database: database)
        XCTAssertEqual(procedureOwner, role)
    }

    /// Before PostgreSQL 15 any role may create in `public`: one could plant the commit
    /// procedure before a fleet first opens an upgraded schema, and acknowledge commits it
    /// never applies. A procedure the items table's owner (or a superuser) does not own is
    /// refused, and nothing is committed through it.
    func testACommitProcedurePlantedByAnotherRoleIsRefused() async throws {
        try await storeAnItemAndClose()
        let attacker = "planter_\(database!)"
        try server.psql("""
            CREATE ROLE \(attacker);
            GRANT USAGE, CREATE ON SCHEMA public TO \(attacker);
            DROP PROCEDURE \(PostgresSchema.commitProcedure);
            SET ROLE \(attacker);
            CREATE PROCEDURE \(PostgresSchema.commitProcedure)(
                text, text, text[], int8[], bool[], bytea[], text[], text, int8, INOUT applied_keys text[], INOUT removed_keys text[], INOUT server_clock int8)
            LANGUAGE plpgsql AS $$ BEGIN applied_keys := $3; removed_keys := $7; COMMIT; END $$;
            """, database: database)
        let refused = await keystoreError { try await self.keystore() }
        XCTAssertEqual(refused?.code, .insecurePermissions, "\(String(describing: refused))")
        XCTAssertTrue(refused?.reason.contains(attacker) ?? false, "\(String(describing: refused))")
        XCTAssertTrue(refused?.reason.contains(PostgresSchema.commitProcedure) ?? false, "\(String(describing: refused))")

        try server.psql("DROP PROCEDURE \(PostgresSchema.commitProcedure)", database: database)
        let reopened = try await keystore()
        try await reopened.set([2], forKey: "session.bob")
        var stored = try server.psqlValue(
            "SELECT count(*) FROM identity_broker_items WHERE key IN ('session.alice', 'session.bob')", database: database)
        XCTAssertEqual(stored, "2", "commits go through the owner's procedure again")

        // The same signature in a schema earlier on the role's search path: the call names
        // the schema it checked, and the owner's procedure applies the commit.
        try server.psql("""
            CREATE SCHEMA early AUTHORIZATION \(attacker);
            GRANT USAGE ON SCHEMA early TO PUBLIC;
            ALTER ROLE \(server.passwordRole) IN DATABASE \(database!) SET search_path = early, public;
            SET ROLE \(attacker);
            CREATE PROCEDURE early.\(PostgresSchema.commitProcedure)(
                text, text, text[], int8[], bool[], bytea[], text[], text, int8, INOUT applied_keys text[], INOUT removed_keys text[], INOUT server_clock int8)
            LANGUAGE plpgsql AS $$ BEGIN applied_keys := $3; removed_keys := $7; COMMIT; END $$;
            """, database: database)
        let shadowed = try await keystore()
        let appliedKeys = try await shadowed.commit({ var batch = KeystoreBatch(); batch.set([5], forKey: "session.frank"); return batch }())
        XCTAssertEqual(appliedKeys, [true])
        stored = try server.psqlValue("SELECT count(*) FROM public.identity_broker_items WHERE key = 'session.frank'", database: database)
        XCTAssertEqual(stored, "1", "the commit applied through the owner's procedure, not the one earlier on the path")

        // An overload beside it, text where the results are text[]: an untyped NULL would
        // prefer it; the typed call does not, and an open refuses a schema with two.
        try server.psql("""
            SET ROLE \(attacker);
            CREATE PROCEDURE public.\(PostgresSchema.commitProcedure)(
                text, text, text[], int8[], bool[], bytea[], text[], text, int8, INOUT applied_keys text, INOUT removed_keys text, INOUT server_clock int8)
            LANGUAGE plpgsql AS $$ BEGIN COMMIT; END $$;
            """, database: database)
        try await reopened.set([3], forKey: "session.carol")
        stored = try server.psqlValue("SELECT count(*) FROM public.identity_broker_items WHERE key = 'session.carol'", database: database)
        XCTAssertEqual(stored, "1", "the commit applied through the owner's procedure, not the overload")
        let overloaded = await keystoreError { try await self.keystore() }
        XCTAssertEqual(overloaded?.code, .insecurePermissions, "\(String(describing: overloaded))")
        XCTAssertTrue(overloaded?.reason.contains("2 routines") ?? false, "\(String(describing: overloaded))")

        // One with a defaulted extra parameter makes the call ambiguous: commits fail, typed,
        // and none is acknowledged.
        try server.psql("""
            SET ROLE \(attacker);
            CREATE PROCEDURE public.\(PostgresSchema.commitProcedure)(
                text, text, text[], int8[], bool[], bytea[], text[], text, int8,
                INOUT applied_keys text[], INOUT removed_keys text[], INOUT server_clock int8, extra int DEFAULT 0)
            LANGUAGE plpgsql AS $$ BEGIN applied_keys := $3; COMMIT; END $$;
            """, database: database)
        let blocked = await keystoreError { try await reopened.set([4], forKey: "session.erin") }
        XCTAssertNotNil(blocked, "the ambiguous call fails")
        stored = try server.psqlValue("SELECT count(*) FROM public.identity_broker_items WHERE key = 'session.erin'", database: database)
        XCTAssertEqual(stored, "0")
    }

    /// A role that may create in a schema on the fleet role's search path (`public` before
    /// PostgreSQL 15) plants functions and operators of the built-ins' names with exact
    /// argument types: PostgreSQL prefers an exact match anywhere on the path to a built-in
    /// that needs a cast. Each plant here raises an error where it runs; an attack review
    /// found four the keystore reached (`quote_ident(name)`, `=(oid, regclass)`,
    /// `=(oid, regprocedure)` at open, `||(integer, text)` in every commit,
    /// `hashtextextended(text, integer)` in a migration), through which another role would
    /// run code with the fleet role's rights; a deployment review found three more, the
    /// polymorphic built-ins the commit used unqualified (`unnest(anyarray)` for each array
    /// of a commit, `||(anycompatiblearray, anycompatiblearray)` where a commit both sets and
    /// removes). None runs: opens, reads, every form of commit and migrations work.
    func testBuiltinsAPlantedFunctionOrOperatorCouldCaptureAreNeverCaptured() async throws {
        let attacker = "capturer_\(database!)"
        try server.psql("""
            CREATE ROLE \(attacker);
            GRANT USAGE, CREATE ON SCHEMA public TO \(attacker);
            SET ROLE \(attacker);
            CREATE FUNCTION public.quote_ident(name) RETURNS text LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted quote_ident ran'; END $$;
            CREATE FUNCTION public.hashtextextended(text, integer) RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted hashtextextended ran'; END $$;
            CREATE FUNCTION public.planted_cat(integer, text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted || ran'; END $$;
            CREATE OPERATOR public.|| (LEFTARG = integer, RIGHTARG = text, FUNCTION = public.planted_cat);
            CREATE FUNCTION public.planted_class(oid, regclass) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted =(oid, regclass) ran'; END $$;
            CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = public.planted_class);
            CREATE FUNCTION public.planted_procedure(oid, regprocedure) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted =(oid, regprocedure) ran'; END $$;
            CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regprocedure, FUNCTION = public.planted_procedure);
            CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted unnest(text[]) ran'; END $$;
            CREATE FUNCTION public.unnest(bigint[]) RETURNS SETOF bigint LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted unnest(bigint[]) ran'; END $$;
            CREATE FUNCTION public.unnest(boolean[]) RETURNS SETOF boolean LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted unnest(boolean[]) ran'; END $$;
            CREATE FUNCTION public.unnest(bytea[]) RETURNS SETOF bytea LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted unnest(bytea[]) ran'; END $$;
            CREATE FUNCTION public.planted_array_cat(text[], text[]) RETURNS text[] LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted ||(text[], text[]) ran'; END $$;
            CREATE OPERATOR public.|| (LEFTARG = text[], RIGHTARG = text[], FUNCTION = public.planted_array_cat);
            CREATE FUNCTION public.planted_times(double precision, integer) RETURNS double precision LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted *(double precision, integer) ran'; END $$;
            CREATE OPERATOR public.* (LEFTARG = double precision, RIGHTARG = integer, FUNCTION = public.planted_times);
            CREATE FUNCTION public.planted_after(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN RAISE 'planted >(bigint, bigint) ran'; END $$;
            CREATE OPERATOR public.> (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.planted_after);
            """, database: database)
        let keystore = try await keystore()
        try await keystore.commit({ var batch = KeystoreBatch(); batch.set([1], forKey: "session.alice"); batch.set([2], forKey: "session.bob"); return batch }())
        let bob = try await keystore.value(forKey: "session.bob")
        XCTAssertEqual(bob, [2])
        // Reads at once (combined into shared statements).
        let read = await readAtOnce((0..<32).map { $0 % 2 == 0 ? "session.alice" : "session.x\($0)" }, from: keystore)
        XCTAssertEqual(read.count, 32)
        for case (let index, .failure(let error)) in read { XCTFail("read \(index): \(error)") }
        // A commit that sets one key and removes another; one that names a key twice.
        try await keystore.commit({ var batch = KeystoreBatch(); batch.set([3], forKey: "session.carol"); batch.remove(forKey: "session.bob"); return batch }())
        try await keystore.commit({ var batch = KeystoreBatch(); batch.set([4], forKey: "session.bob"); batch.set([5], forKey: "session.bob"); return batch }())
        let again = try await keystore.value(forKey: "session.bob")
        XCTAssertEqual(again, [5])
        let moved = try await PostgresKeystore.migrate(
            configuration: try configuration(), service: "tool", from: .none, to: AccessGroup(name: "team"), keySource: .raw(key))
        XCTAssertEqual(moved, 3)
    }

    /// A role with `CREATE` on the database makes a schema named after the fleet's role, which
    /// `"$user"` puts first on its search path, and plants the keystore's tables and a commit
    /// procedure that applies nothing in it: every unqualified statement would use them, and
    /// the procedure check trusted a procedure of the tables' owner. The tables' owner is
    /// neither the fleet's role nor trusted, nor is the schema's: the open is refused.
    func testTablesAnotherRolePlantedInASchemaNamedAfterTheFleetRoleAreRefused() async throws {
        try await storeAnItemAndClose()
        let attacker = "squatter_\(database!)"
        try squatTheFleetRolesSchema(as: attacker)
        // First only the salts table there: the items table still passes, the salts would not.
        try server.psql("""
            SET ROLE \(attacker);
            CREATE TABLE \(server.passwordRole).identity_broker_key_salts (access_group text PRIMARY KEY, salt bytea NOT NULL);
            GRANT SELECT, INSERT, UPDATE, DELETE ON \(server.passwordRole).identity_broker_key_salts TO PUBLIC;
            """, database: database)
        let split = await keystoreError { try await self.keystore() }
        XCTAssertEqual(split?.code, .insecurePermissions, "\(String(describing: split))")
        XCTAssertTrue(split?.reason.contains("is not in schema public") ?? false, "\(String(describing: split))")

        // All three, without a procedure: refused as planted before the open tries to create
        // one beside them (which would fail for want of CREATE there, saying nothing of why).
        try server.psql("DROP TABLE \(server.passwordRole).identity_broker_key_salts", database: database)
        try plantTables(in: server.passwordRole, as: attacker, withProcedure: false)
        let bare = await keystoreError { try await self.keystore() }
        XCTAssertEqual(bare?.code, .insecurePermissions, "\(String(describing: bare))")

        try server.psql("""
            DROP TABLE \(server.passwordRole).identity_broker_schema, \(server.passwordRole).identity_broker_items,
                \(server.passwordRole).identity_broker_key_salts
            """, database: database)
        try plantTables(in: server.passwordRole, as: attacker)
        let refused = await keystoreError { try await self.keystore() }
        XCTAssertEqual(refused?.code, .insecurePermissions, "\(String(describing: refused))")
        XCTAssertTrue(refused?.reason.contains(attacker) ?? false, "\(String(describing: refused))")
        XCTAssertTrue(refused?.reason.contains("named after this role") ?? false, "\(String(describing: refused))")
    }

    /// The same tables planted after the fleet's open, then every connection of the pool
    /// ended (an administrator, a restart, idle churn): the new connections look the tables up
    /// in the schema the open checked alone, so writes and reads keep going to the fleet's
    /// tables and the planted ones see nothing.
    func testTablesPlantedAfterTheOpenAreNeverUsedByNewConnections() async throws {
        let keystore = try await keystore()
        try await keystore.set(Array("before".utf8), forKey: "session.alice")
        let attacker = "latecomer_\(database!)"
        try squatTheFleetRolesSchema(as: attacker)
        try plantTables(in: server.passwordRole, as: attacker)
        _ = try server.psqlValue(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'identity-broker' AND datname = '\(database!)'",
            database: database)
        var written = false
        for _ in 0..<20 where !written {  // a call may meet a connection the server just ended
            do {
                try await keystore.set(Array("after".utf8), forKey: "session.bob")
                written = true
            } catch {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        XCTAssertTrue(written, "no write went through after the connections were ended")
        let value = try await keystore.value(forKey: "session.alice")
        XCTAssertEqual(value.map { String(decoding: $0, as: UTF8.self) }, "before")
        XCTAssertEqual(try server.psqlValue("SELECT count(*) FROM public.identity_broker_items WHERE key LIKE 'session.%'", database: database), "2")
        XCTAssertEqual(try server.psqlValue("SELECT count(*) FROM \(server.passwordRole).identity_broker_items", database: database), "0")
        await keystore.close()
    }

    /// The deployment the check must keep working: a migration role creates the tables in a
    /// schema of its own, which is on the fleet role's search path, and the fleet role (not a
    /// member of it) has table rights only.
    func testTablesAMigrationRoleCreatedInItsOwnSchemaAreUsed() async throws {
        let migrator = "migrator_\(database!)"
        try server.psql("""
            CREATE ROLE \(migrator);
            GRANT CREATE ON DATABASE \(database!) TO \(migrator);
            SET ROLE \(migrator);
            CREATE SCHEMA broker;
            GRANT USAGE ON SCHEMA broker TO \(server.passwordRole);
            SET search_path = broker;
            \(PostgresSchema.createStatements.joined(separator: ";\n"));
            INSERT INTO identity_broker_schema (version) VALUES (\(PostgresSchema.version));
            GRANT SELECT, INSERT, UPDATE, DELETE ON identity_broker_schema, identity_broker_items, identity_broker_key_salts TO \(server.passwordRole);
            \(PostgresSchema.createCommitProcedure(inSchema: "broker"));
            RESET ROLE;
            ALTER ROLE \(server.passwordRole) IN DATABASE \(database!) SET search_path = broker;
            """, database: database)
        let keystore = try await keystore()
        try await keystore.set([1], forKey: "session.alice")
        let stored = try server.psqlValue("SELECT count(*) FROM broker.identity_broker_items WHERE key = 'session.alice'", database: database)
        XCTAssertEqual(stored, "1")
    }

    /// Where every role may create in `public` (the default before PostgreSQL 15), another
    /// role plants the keystore's tables there before the fleet's first open: refused. The
    /// fleet's role creating its own tables there is not.
    func testTablesAnotherRolePlantedWhereEveryRoleMayCreateAreRefused() async throws {
        let attacker = "early_\(database!)"
        try server.psql("""
            GRANT CREATE ON SCHEMA public TO PUBLIC;
            CREATE ROLE \(attacker);
            """, database: database)
        try plantTables(in: "public", as: attacker)
        let refused = await keystoreError { try await self.keystore() }
        XCTAssertEqual(refused?.code, .insecurePermissions, "\(String(describing: refused))")
        XCTAssertTrue(refused?.reason.contains("every role may create objects in schema public") ?? false, "\(String(describing: refused))")

        try server.psql("""
            DROP PROCEDURE public.\(PostgresSchema.commitProcedure);
            DROP TABLE public.identity_broker_schema, public.identity_broker_items, public.identity_broker_key_salts;
            """, database: database)
        let own = try await keystore()
        try await own.set([1], forKey: "session.alice")
        let alice = try await own.value(forKey: "session.alice")
        XCTAssertEqual(alice, [1])
    }

    /// The schema lock is an advisory lock any role that can connect may take and keep. An
    /// open that finds everything in place takes no lock; one that must create waits no
    /// longer than the operation timeout, on the server too (its statement timeout ends the
    /// wait, so no backend is left waiting after the keystore gave up).
    func testAnotherSessionHoldingTheSchemaLockStallsNoOpenOfAnInstalledSchema() async throws {
        _ = try await keystore()
        let holder = try await superuserConnection(id: 1, logger: Logger(label: "lock-holder"))
        try await holder.query("SELECT pg_advisory_lock(\(PostgresSchema.schemaLock))", logger: Logger(label: "lock-holder"))
        // Closed whatever happens: postgres-nio stops the process when a connection is
        // released open.
        var stalledOpen: (any Error)?
        do {
            let opened = try await keystore { $0.operationTimeout = .seconds(2) }
            try await opened.set([1], forKey: "session.alice")
        } catch {
            stalledOpen = error
        }
        try await holder.close()
        XCTAssertNil(stalledOpen, "an open of an installed schema waited for the lock")

        let fresh = try server.createDatabase()
        let freshHolder = try await superuserConnection(id: 2, database: fresh, logger: Logger(label: "lock-holder"))
        try await freshHolder.query("SELECT pg_advisory_lock(\(PostgresSchema.schemaLock))", logger: Logger(label: "lock-holder"))
        var configuration = try configuration()
        configuration.database = fresh
        configuration.operationTimeout = .seconds(2)
        let stalled = await keystoreError {
            try await PostgresKeystore(configuration: configuration, service: "tool", keySource: .raw(self.key))
        }
        let released = await eventually(timeout: .seconds(6)) {
            (try? self.server.psqlValue("SELECT count(*) FROM pg_stat_activity WHERE datname = '\(fresh)' AND wait_event_type = 'Lock'")) == "0"
        }
        try await freshHolder.close()
        XCTAssertEqual(stalled?.code, .storeUnavailable, "\(String(describing: stalled))")
        XCTAssertTrue(released, "a backend still waits for the lock after the open gave up")
    }

    /// A migration's namespace locks used to be advisory locks with predictable keys, which
    /// any role that can connect may take and keep: held, they stalled every migration until
    /// its timeout. Migrations now lock the namespaces' key-check rows instead.
    func testAnAdvisoryLockAnyRoleCanTakeDoesNotStallAMigration() async throws {
        let source = try await keystore()
        try await source.set([1], forKey: "session.alice")
        _ = try await keystore(group: AccessGroup(name: "team"))
        let holder = try await superuserConnection(id: 3, logger: Logger(label: "lock-holder"))
        for name in ["identity_broker:ib2|4:tool0:", "identity_broker:ib2|4:tool4:team"] {
            try await holder.query("SELECT pg_advisory_lock(hashtextextended(\(name), 0))", logger: Logger(label: "lock-holder"))
        }
        var configuration = try configuration()
        configuration.operationTimeout = .seconds(3)
        var outcome: Result<Int, KeystoreError>
        do throws(KeystoreError) {
            outcome = .success(try await PostgresKeystore.migrate(
                configuration: configuration, service: "tool", from: .none, to: AccessGroup(name: "team"), keySource: .raw(key)))
        } catch {
            outcome = .failure(error)
        }
        try await holder.close()
        XCTAssertEqual(try outcome.get(), 1)
    }

    /// A salt without the header, a format the PostgreSQL engine never wrote, would give a
    /// group's passphrase the legacy (cheaper) scrypt cost: another role that may write the
    /// table could plant one before the group's first use. Refused.
    func testAPassphraseSaltWithoutHeaderIsRefused() async throws {
        _ = try await keystore()
        try server.psql(
            "INSERT INTO identity_broker_key_salts (access_group, salt) VALUES ('team', '\\x00112233445566778899aabbccddeeff')",
            database: database)
        let refused = await keystoreError {
            try await self.keystore(group: AccessGroup(name: "team"), keySource: .passphrase("correct horse"))
        }
        XCTAssertEqual(refused?.code, .corruptFormat, "\(String(describing: refused))")
        XCTAssertTrue(refused?.reason.contains("no header") ?? false, "\(String(describing: refused))")
    }

    /// Opens a keystore as the fleet's role (creating the schema), stores `session.alice`, and
    /// closes it.
    private func storeAnItemAndClose() async throws {
        let owner = try await keystore()
        try await owner.set([1], forKey: "session.alice")
        await owner.close()
    }

    /// Creates the keystore's tables (with the current schema version) and a commit procedure
    /// that applies nothing but reports every set as applied, in `schema`, as `role`, usable by
    /// every role.
    /// As `attacker`, a new role with `CREATE` on the database, makes a schema named after the
    /// fleet's role (which `"$user"` puts first on its search path), usable by every role.
    private func squatTheFleetRolesSchema(as attacker: String) throws {
        try server.psql("""
            CREATE ROLE \(attacker);
            GRANT CREATE ON DATABASE \(database!) TO \(attacker);
            SET ROLE \(attacker);
            CREATE SCHEMA \(server.passwordRole);
            GRANT USAGE ON SCHEMA \(server.passwordRole) TO PUBLIC;
            """, database: database)
    }

    private func plantTables(in schema: String, as role: String, withProcedure: Bool = true) throws {
        let procedure = """
            CREATE PROCEDURE \(schema).\(PostgresSchema.commitProcedure)(
                text, text, text[], int8[], bool[], bytea[], text[], text, int8, INOUT applied_keys text[], INOUT removed_keys text[], INOUT server_clock int8)
            LANGUAGE plpgsql AS $$ BEGIN applied_keys := $3; removed_keys := $7; COMMIT; END $$;
            """
        try server.psql("""
            SET ROLE \(role);
            SET search_path = \(schema);
            \(PostgresSchema.createStatements.joined(separator: ";\n"));
            INSERT INTO identity_broker_schema (version) VALUES (\(PostgresSchema.version));
            GRANT SELECT, INSERT, UPDATE, DELETE ON identity_broker_schema, identity_broker_items, identity_broker_key_salts TO PUBLIC;
            \(withProcedure ? procedure : "")
            """, database: database)
    }

    /// A role whose search path starts at another schema (here one whose name needs quoting)
    /// gets the tables and the commit procedure there, commits through that procedure, and
    /// leaves `public` untouched.
    func testTablesAndTheCommitProcedureGoWhereTheSearchPathPointsFirst() async throws {
        let schema = "Fleet Ops"
        try server.psql("""
            CREATE SCHEMA "\(schema)" AUTHORIZATION \(server.passwordRole);
            ALTER ROLE \(server.passwordRole) IN DATABASE \(database!) SET search_path = "\(schema)";
            """, database: database)
        let keystore = try await keystore()
        try await keystore.commit({ var batch = KeystoreBatch(); batch.set([1], forKey: "session.alice"); batch.set([2], forKey: "session.bob"); return batch }())
        let value = try await keystore.value(forKey: "session.bob")
        XCTAssertEqual(value, [2])
        let tables = try server.psqlValue(
            "SELECT string_agg(table_schema || '.' || table_name, ',' ORDER BY table_name) FROM information_schema.tables WHERE table_name LIKE 'identity_broker%'",
            database: database)
        XCTAssertEqual(tables, "\(schema).identity_broker_items,\(schema).identity_broker_key_salts,\(schema).identity_broker_schema")
        let procedures = try server.psqlValue(
            "SELECT string_agg(n.nspname, ',') FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.proname = '\(PostgresSchema.commitProcedure)'",
            database: database)
        XCTAssertEqual(procedures, schema, "the commit procedure lives beside the items table")
        let stored = try server.psqlValue("SELECT count(*) FROM \"\(schema)\".identity_broker_items WHERE key LIKE 'session.%'", database: database)
        XCTAssertEqual(stored, "2", "the commit applied through the procedure in that schema")
        // A second instance finds what the first created.
        let other = try await self.keystore()
        let read = try await other.value(forKey: "session.alice")
        XCTAssertEqual(read, [1])
    }

    /// A client over the keystore re-reads a session whose write had an unknown outcome for
    /// as long as such a commit may still land: up to four operation timeouts (a group's
    /// one-by-one retry), never less than the default minute.
    func testTheUncertainCommitWindowCoversALongOperationTimeout() async throws {
        let standard = try await keystore()
        XCTAssertEqual(standard.uncertainCommitWindow, .seconds(60))
        let patient = try await keystore { $0.operationTimeout = .seconds(45) }
        XCTAssertEqual(patient.uncertainCommitWindow, .seconds(180))
    }

    func testDumpHoldsNoPlaintext() async throws {
        let keystore = try await keystore(group: AccessGroup(name: "team"))
        let secrets = (0..<8).map { "SECRET-\($0)-" + UUID().uuidString + "-ASIAEXAMPLEKEY\($0)" }
        for (index, secret) in secrets.enumerated() {
            try await keystore.set(Array(secret.utf8), forKey: "session.user\(index)", version: Int64(index))
        }
        let dump = try server.dump(database)
        XCTAssertTrue(dump.contains("identity_broker_items"), "the dump holds the table")
        XCTAssertNil(leakedRun(in: dump, of: secrets), "no 16-character run of a value in the dump")
        // bytea dumps as hex: check the hex spelling of each value too.
        let hexSecrets = secrets.map { $0.utf8.map { String(format: "%02x", $0) }.joined() }
        XCTAssertNil(leakedRun(in: dump, of: hexSecrets), "no value in hex either")
    }
}
