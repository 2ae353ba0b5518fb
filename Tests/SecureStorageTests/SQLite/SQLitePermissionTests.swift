import BrokerTestSupport
import CSQLite
import Foundation
import XCTest
@testable import SecureStorage

final class SQLitePermissionTests: XCTestCase {
    func testPrivateModes() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        try await keystore.set([1], forKey: "k")
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        XCTAssertEqual(mode(of: temporary.root), 0o700)
        XCTAssertEqual(mode(of: layout.usersDirectory), 0o700)
        XCTAssertEqual(mode(of: layout.userDirectory), 0o700)
        XCTAssertEqual(mode(of: layout.keyFilePath(.none)), 0o600)
        XCTAssertEqual(mode(of: layout.databasePath(.none)), 0o600)
        XCTAssertEqual(mode(of: layout.databasePath(.none) + "-wal"), 0o600)
        XCTAssertEqual(mode(of: layout.databasePath(.none) + "-shm"), 0o600)
    }

    func testSharedGroupModesUnderUmask077() async throws {
        let temporary = try TemporaryRoot()
        let previous = umask(0o077)
        defer { umask(previous) }
        let team = AccessGroup(name: "team")
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: team)
        defer { keystore.close() }
        try await keystore.set([1], forKey: "k")
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        XCTAssertEqual(mode(of: layout.namespaceDirectory(team)), 0o2770)
        XCTAssertEqual(mode(of: layout.keyFilePath(team)), 0o640)
        XCTAssertEqual(mode(of: layout.databasePath(team)), 0o660)
        XCTAssertEqual(mode(of: layout.databasePath(team) + "-wal"), 0o660)
        XCTAssertEqual(mode(of: layout.databasePath(team) + "-shm"), 0o660)
    }

    func testGroupSharedRootGetsStickyContainers() async throws {
        let temporary = try TemporaryRoot()
        XCTAssertEqual(mkdir(temporary.root, 0o700), 0)
        XCTAssertEqual(chmod(temporary.root, 0o3770), 0)
        let team = AccessGroup(name: "team")
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: team)
        keystore.close()
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        XCTAssertEqual(mode(of: layout.groupsDirectory), 0o3770)
        XCTAssertEqual(mode(of: layout.usersDirectory) & 0o1770, 0o1770)
        XCTAssertEqual(mode(of: layout.userDirectory), 0o700)
    }

    /// Links on the way to the root are followed (SQLite's no-follow open alone refused a link
    /// in any component); links below the root stay refused (`testPlantedFilesAreRefusedWithoutHanging`).
    func testALinkedRootAndALinkedParentAreFollowed() async throws {
        let temporary = try TemporaryRoot()
        XCTAssertEqual(mkdir(temporary.path + "/real", 0o700), 0)
        let resolved = try XCTUnwrap(realpath(temporary.path + "/real", nil))
        let real = String(cString: resolved)
        free(resolved)
        XCTAssertEqual(symlink(real, temporary.path + "/parent-link"), 0)
        let throughParent = try SQLiteKeystore(root: temporary.path + "/parent-link/store", service: "tool", keySource: testKey())
        try await throughParent.set([1, 2], forKey: "k")
        XCTAssertEqual(throughParent.root, real + "/store")
        throughParent.close()

        XCTAssertEqual(symlink(real + "/store", temporary.path + "/root-link"), 0)
        let throughRoot = try SQLiteKeystore(root: temporary.path + "/root-link", service: "tool", keySource: testKey())
        defer { throughRoot.close() }
        let value = try await throughRoot.value(forKey: "k")
        XCTAssertEqual(value, [1, 2])
        let layout = try StoreLayout(root: temporary.path + "/root-link", service: "tool")
        XCTAssertEqual(layout.databasePath(.none), real + "/store/users/\(geteuid())/" + Base64.urlEncode("tool".utf8) + ".sqlite")
    }

    /// Sharing is by Unix group: a root, `users/` or `groups/` anyone may write (a sticky
    /// `/tmp/ks` someone else made first) is refused, sticky or not.
    func testAWorldWritableRootOrContainerIsRefused() throws {
        let temporary = try TemporaryRoot()
        XCTAssertEqual(mkdir(temporary.root, 0o700), 0)
        XCTAssertEqual(chmod(temporary.root, 0o1777), 0)
        guard case .failure(let error) = openResult(root: temporary.root) else { return XCTFail("opened a world-writable root") }
        XCTAssertEqual(error.code, .insecurePermissions)
        XCTAssertTrue(error.reason.contains("writable by everyone"), error.reason)
        XCTAssertEqual(error.path, temporary.root)

        XCTAssertEqual(chmod(temporary.root, 0o700), 0)
        guard case .success(let keystore) = openResult(root: temporary.root) else { return XCTFail("a private root did not open") }
        keystore.close()
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        XCTAssertEqual(chmod(layout.usersDirectory, 0o1777), 0)
        guard case .failure(let users) = openResult(root: temporary.root) else { return XCTFail("opened with a world-writable users/") }
        XCTAssertEqual(users.path, layout.usersDirectory)
        XCTAssertTrue(users.reason.contains("writable by everyone"), users.reason)
    }

    /// Anyone who can write a directory on the way to the root could rename the root away
    /// and put another in its place: a directory another group can write is refused unless
    /// sticky.
    func testARootInADirectoryOthersCanWriteWithoutStickyIsRefused() throws {
        guard getuid() == 0 else { throw missingPrerequisite("needs root to give a directory another group") }
        let temporary = try TemporaryRoot()
        let parent = temporary.path + "/team"
        XCTAssertEqual(mkdir(parent, 0o700), 0)
        XCTAssertEqual(chown(parent, 0, 60_000), 0)
        XCTAssertEqual(chmod(parent, 0o2770), 0)
        let root = parent + "/ks"
        guard case .failure(let error) = openResult(root: root) else { return XCTFail("opened a root others could rename") }
        XCTAssertEqual(error.code, .insecurePermissions)
        XCTAssertTrue(error.reason.contains("\(parent) is writable by others and not sticky"), error.reason)
        XCTAssertEqual(error.path, parent)

        XCTAssertEqual(chmod(parent, 0o3770), 0)
        guard case .success(let keystore) = openResult(root: root) else { return XCTFail("a sticky parent did not open") }
        keystore.close()
    }

    /// A directory everyone can write, not sticky (a Kubernetes `emptyDir`), above the root:
    /// refused, unless the configuration says no one else can reach it.
    func testAWayOthersCanWriteOpensOnlyWhenTheCheckIsTurnedOff() throws {
        let temporary = try TemporaryRoot()
        let volume = temporary.path + "/volume"
        XCTAssertEqual(mkdir(volume, 0o700), 0)
        XCTAssertEqual(chmod(volume, 0o777), 0)
        guard case .failure(let error) = openResult(root: volume + "/ks") else { return XCTFail("opened under a world-writable directory") }
        XCTAssertTrue(error.reason.contains("\(volume) is writable by others and not sticky"), error.reason)
        let keystore = try SQLiteKeystore(
            root: volume + "/ks", service: "tool", keySource: testKey(), configuration: .init(checksWayToRoot: false))
        keystore.close()
        // What is below the root is checked either way.
        XCTAssertEqual(chmod(volume + "/ks", 0o777), 0)
        assertThrows(KeystoreError.self, code: .insecurePermissions) {
            try SQLiteKeystore(root: volume + "/ks", service: "tool", keySource: testKey(), configuration: .init(checksWayToRoot: false))
        }
    }

    /// With the check of the way to the root turned off, the root's owner is still checked:
    /// "no other user here" is a claim the owner can refute.
    func testARootAnotherUserOwnsIsRefusedWithTheWayToItUnchecked() throws {
        guard getuid() == 0 else { throw missingPrerequisite("needs root to make a root another user owns") }
        let temporary = try TemporaryRoot()
        let volume = temporary.path + "/volume"
        XCTAssertEqual(mkdir(volume, 0o700), 0)
        XCTAssertEqual(chmod(volume, 0o777), 0)
        XCTAssertEqual(mkdir(volume + "/ks", 0o700), 0)
        XCTAssertEqual(chown(volume + "/ks", 60_001, 60_000), 0)
        XCTAssertThrowsError(try SQLiteKeystore(
            root: volume + "/ks", service: "tool", keySource: testKey(), configuration: .init(checksWayToRoot: false))
        ) { error in
            let reason = (error as? KeystoreError)?.reason ?? ""
            XCTAssertTrue(reason.contains("\(volume)/ks belongs to another user (uid 60001)"), reason)
        }
        XCTAssertEqual(chown(volume + "/ks", 0, 0), 0)
        let again = try SQLiteKeystore(
            root: volume + "/ks", service: "tool", keySource: testKey(), configuration: .init(checksWayToRoot: false))
        again.close()
    }

    /// Under a shared root any member can make entries in `users/`, and none can remove
    /// another's: a member who makes `users/<uid>` (or other names, links, or a hard link to
    /// one of the user's files) before a user's first run must not shut the user out of
    /// private sessions. The user's directory is the one the user owns, under a name no one
    /// could guess, and stays found when the squatter's entries go.
    func testAMemberWhoTakesTheUsersDirectoryNameFirstDoesNotShutTheUserOut() async throws {
        guard getuid() == 0 else { throw missingPrerequisite("needs root to make entries another user owns") }
        let temporary = try TemporaryRoot()
        let (root, users) = makeGroupSharedRoot(temporary)
        let me = "\(geteuid())"
        func squat(_ name: String) {
            XCTAssertEqual(mkdir(users + "/" + name, 0o700), 0, name)
            XCTAssertEqual(chown(users + "/" + name, 60_001, 60_000), 0, name)
        }
        squat(me)
        squat(me + ".1")
        XCTAssertEqual(symlink(root, users + "/\(me).2"), 0)
        XCTAssertEqual(lchown(users + "/\(me).2", 60_001, 60_000), 0)
        // A file of the user's, hard-linked there by a member: not a directory, so not counted.
        XCTAssertTrue(FileManager.default.createFile(atPath: users + "/\(me).3", contents: Data([1])))
        func privateDirectory() throws -> String {
            let layout = try StoreLayout(root: root, service: "tool")
            XCTAssertTrue(try layout.prepareDirectories(.none, create: false))
            return layout.userDirectory
        }

        let first = try SQLiteKeystore(root: root, service: "tool", keySource: testKey())
        try await first.set([1, 2, 3], forKey: "k")
        first.close()
        let chosen = try privateDirectory()
        XCTAssertTrue(chosen.hasPrefix(users + "/\(me)."), chosen)
        XCTAssertFalse([me, me + ".1", me + ".2", me + ".3"].map { users + "/" + $0 }.contains(chosen), chosen)
        var info = stat()
        XCTAssertEqual(lstat(chosen, &info), 0)
        XCTAssertEqual(info.st_uid, geteuid())
        XCTAssertEqual(info.st_mode & 0o7777, 0o700)

        // The squatter's entries gone: the same directory, the same item, no second directory.
        for name in [me, me + ".1", me + ".2"] { XCTAssertEqual(remove(users + "/" + name), 0, name) }
        let second = try SQLiteKeystore(root: root, service: "tool", keySource: testKey())
        let value = try await second.value(forKey: "k")
        XCTAssertEqual(value, [1, 2, 3])
        second.close()
        XCTAssertEqual(lstat(users + "/" + me, &info), -1, "no second private directory was made")
        XCTAssertEqual(try privateDirectory(), chosen)
        // The reader that opens nothing new finds it too.
        let reader = try XCTUnwrap(try SQLiteKeystore.SingleReader.open(root: root, service: "tool", keySource: testKey()))
        XCTAssertEqual(try reader.value(forKey: "k"), [1, 2, 3])
        reader.close()

        // A second directory of the user's there (one a member could move in, were it
        // writable to them): an error naming both, never a silent choice that hides one.
        XCTAssertEqual(mkdir(users + "/\(me).5", 0o770), 0)
        guard case .failure(let error) = openResult(root: root, keySource: testKey()) else { return XCTFail("chose one of two") }
        XCTAssertEqual(error.code, .insecurePermissions)
        XCTAssertTrue(error.reason.contains("more than one directory of yours") && error.reason.contains("\(me).5")
            && error.reason.contains(POSIX.lastComponent(of: chosen)), error.reason)
        XCTAssertEqual(rmdir(users + "/\(me).5"), 0)
        guard case .success(let third) = openResult(root: root, keySource: testKey()) else { return XCTFail("did not open again") }
        third.close()

        // One the user made writable to the group (its group directory, 2770), which a member
        // who owns `groups/` can move here (found by an attack review): it neither makes the
        // user's own one of several nor is chosen over it.
        XCTAssertEqual(mkdir(users + "/\(me).7", 0o700), 0)
        XCTAssertEqual(chmod(users + "/\(me).7", 0o2770), 0)
        guard case .success(let fourth) = openResult(root: root, keySource: testKey()) else {
            return XCTFail("a group-writable directory of the user's shut the user out of private sessions")
        }
        let kept = try await fourth.value(forKey: "k")
        XCTAssertEqual(kept, [1, 2, 3])
        fourth.close()
        XCTAssertEqual(try privateDirectory(), chosen)
        XCTAssertEqual(rmdir(users + "/\(me).7"), 0)
    }

    /// While the user has no private directory (never opened one here, or removed theirs to
    /// start afresh), a member who owns `groups/` can move the user's group directory (2770,
    /// the user's) into `users/` under the user's name. It is then the only directory of the
    /// user's there; it must not be taken as the private one, which the namespace check
    /// refuses, shutting the user out of private sessions (group opens included: they record
    /// the last group in the private database) until the user moves it.
    func testTheUsersGroupDirectoryMovedIntoUsersBeforeTheFirstPrivateOpenDoesNotShutTheUserOut() async throws {
        guard getuid() == 0 else { throw missingPrerequisite("needs root to make a group-shared root") }
        let temporary = try TemporaryRoot()
        let (root, users) = makeGroupSharedRoot(temporary)
        let me = "\(geteuid())"
        let group = AccessGroup(name: "team")
        let shared = try SQLiteKeystore(root: root, service: "tool", accessGroup: group, keySource: testKey())
        try await shared.set([9], forKey: "g")
        shared.close()
        // The group's open made the private directory too; the user starts afresh.
        try FileManager.default.removeItem(atPath: users + "/" + me)
        let groupDirectory = try StoreLayout(root: root, service: "tool").namespaceDirectory(group)
        XCTAssertEqual(mode(of: groupDirectory), 0o2770)
        XCTAssertEqual(rename(groupDirectory, users + "/" + me), 0)

        // A read that creates nothing finds no private session, rather than an error.
        let reader = try SQLiteKeystore.SingleReader.open(root: root, service: "tool", keySource: testKey())
        XCTAssertNil(reader, "no private database yet")
        reader?.close()
        guard case .success(let first) = openResult(root: root, keySource: testKey()) else {
            return XCTFail("the user's group directory, moved into users/, shut the user out of private sessions")
        }
        try await first.set([1, 2, 3], forKey: "k")
        first.close()
        let layout = try StoreLayout(root: root, service: "tool")
        XCTAssertTrue(try layout.prepareDirectories(.none, create: false))
        let chosen = layout.userDirectory
        XCTAssertTrue(chosen.hasPrefix(users + "/\(me)."), chosen)
        XCTAssertEqual(mode(of: chosen), 0o700)
        XCTAssertEqual(mode(of: users + "/" + me), 0o2770, "the moved directory is left as it is")
        let second = try SQLiteKeystore(root: root, service: "tool", keySource: testKey())
        let value = try await second.value(forKey: "k")
        XCTAssertEqual(value, [1, 2, 3])
        second.close()

        // The user's own private directory made group-writable by hand is still taken (and
        // refused, saying why), never passed over for a new empty one that hides its sessions.
        let other = try TemporaryRoot()
        let own = try SQLiteKeystore(root: other.root, service: "tool", keySource: testKey())
        try await own.set([4], forKey: "k")
        own.close()
        let ownDirectory = try StoreLayout(root: other.root, service: "tool").userDirectory
        XCTAssertEqual(chmod(ownDirectory, 0o770), 0)
        guard case .failure(let error) = openResult(root: other.root, keySource: testKey()) else {
            return XCTFail("a private directory made group-writable was used or replaced")
        }
        XCTAssertEqual(error.code, .insecurePermissions)
        XCTAssertEqual(error.path, ownDirectory)
    }

    /// First runs of one user at once: a directory is made pending (mode 000) and committed
    /// (0700) only when it is the user's only one, so no process writes where later opens
    /// would not look, and a committed directory, which another process may already use, is
    /// never removed.
    func testOnlyAPrivateDirectoryThatIsTheUsersOnlyOneIsCommitted() throws {
        let temporary = try TemporaryRoot()
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        XCTAssertTrue(try layout.prepareDirectories(.none, create: true))
        let theirs = layout.userDirectory
        let ours = layout.usersDirectory + "/\(geteuid()).12345"
        let made = try XCTUnwrap(try layout.makePendingDirectory(ours))
        XCTAssertEqual(mode(of: ours), 0)
        XCTAssertFalse(try layout.commitsPrivateDirectory(made))
        XCTAssertFalse(FileManager.default.fileExists(atPath: ours), "the pending one is removed")
        XCTAssertEqual(mode(of: theirs), 0o700, "the committed one stays")
        XCTAssertEqual(try layout.choosePrivateDirectory(create: true), theirs)

        let fresh = try TemporaryRoot()
        let alone = try StoreLayout(root: fresh.root, service: "tool")
        XCTAssertTrue(try alone.prepareDirectories(.none, create: false) == false)
        XCTAssertEqual(mkdir(fresh.root, 0o700), 0)
        XCTAssertEqual(mkdir(alone.usersDirectory, 0o700), 0)
        let pending = alone.usersDirectory + "/\(geteuid())"
        let mine = try XCTUnwrap(try alone.makePendingDirectory(pending))
        XCTAssertNil(try alone.makePendingDirectory(pending), "mkdir decides")
        XCTAssertTrue(try alone.commitsPrivateDirectory(mine), "alone, it is committed")
        XCTAssertEqual(mode(of: pending), 0o700)

        // One this process made and another process removed and made again under the same
        // name is not this process's to commit or remove.
        let other = alone.usersDirectory + "/\(geteuid()).5"
        let replaced = try XCTUnwrap(try alone.makePendingDirectory(other))
        // Moved aside rather than removed, so that the new one cannot reuse its inode number.
        XCTAssertEqual(rename(other, fresh.path + "/aside"), 0)
        XCTAssertEqual(mkdir(other, 0), 0)
        XCTAssertFalse(try alone.commitsPrivateDirectory(replaced))
        XCTAssertTrue(FileManager.default.fileExists(atPath: other), "the other process's directory stays")
        XCTAssertEqual(mode(of: other), 0, "and stays pending")
    }

    /// A crash between making a directory and committing it leaves a pending one: never
    /// chosen, even as `<uid>` beside the user's `<uid>.<N>` (which would hide its sessions),
    /// and removed once stale.
    func testAPendingDirectoryACrashLeftIsNeverChosenAndGoesOnceStale() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        try await keystore.set([4], forKey: "k")
        keystore.close()
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        let numbered = layout.usersDirectory + "/\(geteuid()).77"
        XCTAssertEqual(rename(layout.userDirectory, numbered), 0)
        let leftover = layout.usersDirectory + "/\(geteuid())"
        XCTAssertEqual(mkdir(leftover, 0), 0)

        let reader = try XCTUnwrap(try SQLiteKeystore.SingleReader.open(root: temporary.root, service: "tool", keySource: testKey()))
        XCTAssertEqual(try reader.value(forKey: "k"), [4], "the committed one is read, not the pending <uid>")
        reader.close()
        XCTAssertTrue(FileManager.default.fileExists(atPath: leftover), "a fresh pending one may be another process's")

        var old = [timespec(tv_sec: time(nil) - 60, tv_nsec: 0), timespec(tv_sec: time(nil) - 60, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, leftover, &old, 0), 0)
        let again = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        let value = try await again.value(forKey: "k")
        XCTAssertEqual(value, [4])
        again.close()
        XCTAssertFalse(FileManager.default.fileExists(atPath: leftover), "a stale pending one is removed")

        // A directory of the user's with mode 000 that holds entries is no leftover: neither
        // removed nor passed over for a new one, which would hide what it holds.
        XCTAssertEqual(rename(numbered, leftover), 0)
        XCTAssertEqual(chmod(leftover, 0), 0)
        XCTAssertEqual(utimensat(AT_FDCWD, leftover, &old, 0), 0)
        guard case .failure(let error) = openResult(root: temporary.root, keySource: testKey()) else { return XCTFail("passed it over") }
        XCTAssertTrue(error.reason.contains("has mode 000 but holds entries"), error.reason)
        XCTAssertEqual(chmod(leftover, 0o700), 0)
        XCTAssertEqual(try ownNames(in: layout.usersDirectory), ["\(geteuid())"], "nothing else was made")
    }

    /// The user's private directory `chmod 000`ed by hand, just now: not taken for another
    /// process's pending one (which a read would pass over as "no sessions", and a remove
    /// would report done), but an error for reads and writes alike, until it is fixed.
    func testAPrivateDirectoryClosedByHandIsAnErrorForReadsToo() async throws {
        let temporary = try TemporaryRoot()
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool", keySource: testKey())
        try await keystore.set([5], forKey: "k")
        keystore.close()
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        // Last modified two seconds ago (whatever the file system's timestamp granularity), as
        // a directory chmod-ed by hand a while after its last write is.
        var twoSecondsAgo = [timespec(tv_sec: time(nil) - 2, tv_nsec: 0), timespec(tv_sec: time(nil) - 2, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, layout.userDirectory, &twoSecondsAgo, 0), 0)
        XCTAssertEqual(chmod(layout.userDirectory, 0), 0)
        defer { _ = chmod(layout.userDirectory, 0o700) }
        do {
            _ = try SQLiteKeystore.SingleReader.open(root: temporary.root, service: "tool", keySource: testKey())
            XCTFail("a read passed the directory over")
        } catch {
            XCTAssertEqual(error.code, .insecurePermissions)
            XCTAssertTrue(error.reason.contains("has mode 000 but holds entries"), error.reason)
        }
        guard case .failure(let error) = openResult(root: temporary.root, keySource: testKey()) else { return XCTFail("an open passed it over") }
        XCTAssertTrue(error.reason.contains("has mode 000 but holds entries"), error.reason)
        XCTAssertEqual(chmod(layout.userDirectory, 0o700), 0)
        let reader = try XCTUnwrap(try SQLiteKeystore.SingleReader.open(root: temporary.root, service: "tool", keySource: testKey()))
        XCTAssertEqual(try reader.value(forKey: "k"), [5], "nothing was lost")
        reader.close()
        XCTAssertEqual(try ownNames(in: layout.usersDirectory), ["\(geteuid())"], "nothing else was made")
    }

    private func ownNames(in directory: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix("\(geteuid())") }.sorted()
    }

    /// Under umask 002 (Debian's and Fedora's user-private groups) `~/.local` is writable by
    /// the user's own group, which no one else is in: the default root under it opens.
    func testADirectoryOnlyTheUsersPrivateGroupCanWriteIsOnTheWay() throws {
        guard let group = WayToRoot.privateGroup(of: geteuid()) else {
            throw missingPrerequisite("this user's primary group is not a private one (a user-private group, as Debian and Fedora give every user)")
        }
        let temporary = try TemporaryRoot()
        let parent = temporary.path + "/local"
        XCTAssertEqual(mkdir(parent, 0o700), 0)
        XCTAssertEqual(chown(parent, geteuid(), group), 0)
        XCTAssertEqual(chmod(parent, 0o775), 0)
        guard case .success(let keystore) = openResult(root: parent + "/ks") else {
            return XCTFail("a directory only the user's private group can write was refused")
        }
        keystore.close()
    }

    /// A directory that vanishes while the way is walked was moved by someone: refused,
    /// never taken as the end of the walk.
    func testAWayThatChangesWhileWalkedIsRefused() {
        var walk = WayToRoot(userID: geteuid())
        let missing = FileManager.default.temporaryDirectory.path + "/gone-\(UUID().uuidString)/ks"
        XCTAssertThrowsError(try walk.check(missing)) { error in
            let reason = (error as? KeystoreError)?.reason ?? ""
            XCTAssertTrue(reason.contains("changed while it was checked"), reason)
        }
    }

    /// SQLite opens a database's `-wal` again for every new connection, after the keystore's
    /// checks, and a group member may replace it meanwhile: a FIFO there that others may not
    /// write (SQLite then opens it read-only) held the process in `open` for good. Through the
    /// keystore's open guard SQLite refuses it (`SQLITE_CANTOPEN`). Without the guard, a user
    /// other than root waits for good; root, which may open it for writing, reads on as if
    /// nothing were there: either way the result is not `SQLITE_CANTOPEN`.
    func testAFIFOPutWhereAWalFileGoesFailsTheConnectionInsteadOfHoldingIt() throws {
        let temporary = try TemporaryRoot()
        let path = try plainDatabaseWithTheGuardsInstalled(
            in: temporary, named: "raw.sqlite", "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES(1);")
        unlink(path + "-wal")
        XCTAssertEqual(mkfifo(path + "-wal", 0o444), 0)
        let result = withinTimeout(10) { () -> Int32 in
            var reader: OpaquePointer?
            defer { sqlite3_close(reader) }
            let opened = sqlite3_open_v2(path, &reader, SQLITE_OPEN_READWRITE, nil)
            guard opened == SQLITE_OK else { return opened }
            return sqlite3_exec(reader, "SELECT x FROM t", nil, nil, nil)
        }
        XCTAssertEqual(result.map { $0 & 0xFF }, SQLITE_CANTOPEN, "SQLite opened the FIFO (result \(String(describing: result)))")
    }

    /// The open guard opens without blocking, and a non-blocking open of a file another
    /// process holds a lease on fails at once (the kernel starts breaking the lease) where a
    /// blocking one would wait for the holder to let go. SQLite then falls back to opening the
    /// database read-only, and every write fails. The guard waits as a blocking open would,
    /// trying again, so a backup or indexing tool that leases the database costs a wait.
    func testAnOpenHeldBackByALeaseWaitsForItsRelease() throws {
        let temporary = try TemporaryRoot()
        let path = try plainDatabaseWithTheGuardsInstalled(in: temporary, named: "leased.sqlite", "CREATE TABLE t(x); INSERT INTO t VALUES(7);")
        // A read lease (F_SETLEASE 1024, F_RDLCK 0), held for a second after its break began.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        holder.arguments = ["python3", "-c", """
            import fcntl, os, signal, sys, time
            path = sys.argv[1]
            broken = []
            signal.signal(signal.SIGIO, lambda number, frame: broken.append(time.monotonic()))
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.fcntl(fd, 1024, 0)
            except OSError as error:
                with open(path + ".why", "w") as note:
                    note.write(os.strerror(error.errno))
                os.rename(path + ".why", path + ".unsupported")
                sys.exit(3)
            open(path + ".leased", "w").close()
            deadline = time.monotonic() + 60
            while not broken and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(1)
            open(path + ".released", "w").close()
            fcntl.fcntl(fd, 1024, 2)
            time.sleep(60)
            """, path]
        try holder.run()
        defer { holder.terminate(); holder.waitUntilExit() }
        let start = Date()
        while !FileManager.default.fileExists(atPath: path + ".leased") {
            if let reason = try? String(contentsOfFile: path + ".unsupported", encoding: .utf8) {
                throw missingPrerequisite("this file system or kernel gives no file leases (F_SETLEASE: \(reason)); the guard's retry is not exercised here")
            }
            guard holder.isRunning, Date().timeIntervalSince(start) < 30 else { return XCTFail("the lease was never taken") }
            usleep(10_000)
        }
        let result = withinTimeout(30) { () -> (Int32, Bool) in
            var connection: OpaquePointer?
            defer { sqlite3_close(connection) }
            let opened = sqlite3_open_v2(path, &connection, SQLITE_OPEN_READWRITE, nil)
            let releasedFirst = FileManager.default.fileExists(atPath: path + ".released")
            guard opened == SQLITE_OK else { return (opened, releasedFirst) }
            return (sqlite3_exec(connection, "INSERT INTO t VALUES(8)", nil, nil, nil), releasedFirst)
        }
        XCTAssertEqual(result?.0, SQLITE_OK, "the database was not opened for writing while the lease was being broken")
        XCTAssertEqual(result?.1, true, "the open returned before the lease was let go")
    }

    /// A database made with plain libsqlite3 calls (`sql` run in it, closed) in `temporary`'s
    /// root, once a keystore's open has installed the guards every later open goes through.
    private func plainDatabaseWithTheGuardsInstalled(in temporary: TemporaryRoot, named name: String, _ sql: String) throws -> String {
        try SQLiteKeystore(root: temporary.root, service: "guards").close()
        let path = temporary.root + "/" + name
        var connection: OpaquePointer?
        XCTAssertEqual(sqlite3_open_v2(path, &connection, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil), SQLITE_OK)
        XCTAssertEqual(sqlite3_exec(connection, sql, nil, nil, nil), SQLITE_OK)
        sqlite3_close(connection)
        return path
    }

    func testGroupWritableRootWithoutStickyIsRefused() throws {
        let temporary = try TemporaryRoot()
        XCTAssertEqual(mkdir(temporary.root, 0o700), 0)
        XCTAssertEqual(chmod(temporary.root, 0o2770), 0)
        guard case .failure(let error) = openResult(root: temporary.root) else { return XCTFail("opened") }
        XCTAssertEqual(error.code, .insecurePermissions)
        XCTAssertTrue(error.reason.contains("chmod +t"), error.reason)
        XCTAssertEqual(error.path, temporary.root)
    }

    func testLoosePrivateDatabaseIsRefused() throws {
        let temporary = try TemporaryRoot()
        try SQLiteKeystore(root: temporary.root, service: "tool").close()
        let path = try StoreLayout(root: temporary.root, service: "tool").databasePath(.none)
        XCTAssertEqual(chmod(path, 0o640), 0)
        guard case .failure(let error) = openResult(root: temporary.root) else { return XCTFail("opened") }
        XCTAssertEqual(error.code, .insecurePermissions)
        XCTAssertEqual(error.path, path)
    }

    func testLooserPrivateDirectoryIsRefused() throws {
        let temporary = try TemporaryRoot()
        try SQLiteKeystore(root: temporary.root, service: "tool").close()
        let directory = try StoreLayout(root: temporary.root, service: "tool").userDirectory
        for looser: mode_t in [0o750, 0o705, 0o755, 0o770] {
            XCTAssertEqual(chmod(directory, looser), 0)
            guard case .failure(let error) = openResult(root: temporary.root) else { return XCTFail("opened with \(String(looser, radix: 8))") }
            XCTAssertEqual(error.code, .insecurePermissions)
            XCTAssertEqual(error.path, directory)
            XCTAssertEqual(error.mode.map { $0 & 0o777 }, UInt32(looser))
            XCTAssertTrue(error.reason.contains("0700"), error.reason)
        }
        XCTAssertEqual(chmod(directory, 0o700), 0)
        try SQLiteKeystore(root: temporary.root, service: "tool").close()
    }

    func testLooserPrivateKeyFileIsRefused() throws {
        let temporary = try TemporaryRoot()
        try SQLiteKeystore(root: temporary.root, service: "tool").close()
        let keyPath = try StoreLayout(root: temporary.root, service: "tool").keyFilePath(.none)
        for looser: mode_t in [0o640, 0o604, 0o644, 0o660, 0o700] {
            XCTAssertEqual(chmod(keyPath, looser), 0)
            guard case .failure(let error) = openResult(root: temporary.root) else { return XCTFail("opened with \(String(looser, radix: 8))") }
            XCTAssertEqual(error.code, .insecurePermissions)
            XCTAssertEqual(error.path, keyPath)
            XCTAssertTrue(error.description.contains("0\(String(looser, radix: 8))"), error.description)
        }
        // Stricter is fine.
        XCTAssertEqual(chmod(keyPath, 0o400), 0)
        try SQLiteKeystore(root: temporary.root, service: "tool").close()
    }

    func testLooserPrivateDatabaseSiblingIsRefused() async throws {
        let temporary = try TemporaryRoot()
        // An open keystore keeps its -wal file (SQLite removes it with the last connection).
        let keystore = try SQLiteKeystore(root: temporary.root, service: "tool")
        defer { keystore.close() }
        try await keystore.set([1], forKey: "k")
        let wal = try StoreLayout(root: temporary.root, service: "tool").databasePath(.none) + "-wal"
        XCTAssertTrue(FileManager.default.fileExists(atPath: wal))
        XCTAssertEqual(chmod(wal, 0o644), 0)
        guard case .failure(let error) = openResult(root: temporary.root) else { return XCTFail("opened") }
        XCTAssertEqual(error.code, .insecurePermissions)
        XCTAssertEqual(error.path, wal)
    }

    func testSharedGroupLimits() throws {
        let temporary = try TemporaryRoot()
        let team = AccessGroup(name: "team")
        try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: team).close()
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        func assertRefused(_ path: String, _ looser: mode_t, line: UInt = #line) {
            XCTAssertEqual(chmod(path, looser), 0, line: line)
            guard case .failure(let error) = openResult(root: temporary.root, group: team) else {
                return XCTFail("opened with \(path) at 0\(String(looser, radix: 8))", line: line)
            }
            XCTAssertEqual(error.code, .insecurePermissions, "\(error)", line: line)
            XCTAssertEqual(error.path, path, line: line)
        }
        let keyPath = layout.keyFilePath(team)
        assertRefused(keyPath, 0o660)
        assertRefused(keyPath, 0o644)
        XCTAssertEqual(chmod(keyPath, 0o640), 0)
        let database = layout.databasePath(team)
        assertRefused(database, 0o664)
        assertRefused(database, 0o666)
        XCTAssertEqual(chmod(database, 0o660), 0)
        let directory = layout.namespaceDirectory(team)
        assertRefused(directory, 0o2775)
        assertRefused(directory, 0o2771)
        XCTAssertEqual(chmod(directory, 0o2770), 0)
        try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: team).close()
    }

    /// Plants `kind` at `path` (after an initial open created the store, unless `fresh`), and
    /// checks that opening is refused naming the path, without hanging.
    private func assertPlantRefused(suffix: String, group: AccessGroup = .none, fresh: Bool, plant: (String) -> Int32, file: StaticString = #filePath, line: UInt = #line) throws {
        let temporary = try TemporaryRoot()
        let layout = try StoreLayout(root: temporary.root, service: "tool")
        if fresh {
            XCTAssertTrue(try layout.prepareDirectories(group, create: true), file: file, line: line)
        } else {
            try SQLiteKeystore(root: temporary.root, service: "tool", accessGroup: group).close()
        }
        let path = suffix == "key" ? layout.keyFilePath(group) : layout.databasePath(group) + suffix
        _ = unlink(path)
        XCTAssertEqual(plant(path), 0, "planting at \(path)", file: file, line: line)
        let root = temporary.root
        let result = withinTimeout(10, file: file, line: line) { openResult(root: root, group: group).map { $0.close() } }
        guard case .failure(let error)? = result else { return XCTFail("opened with a plant at \(path)", file: file, line: line) }
        XCTAssertEqual(error.code, .insecurePermissions, "\(error)", file: file, line: line)
        XCTAssertEqual(error.path, path, file: file, line: line)
    }

    func testPlantedFilesAreRefusedWithoutHanging() throws {
        let (victim, plants) = try hostilePlants()
        defer { try? FileManager.default.removeItem(atPath: victim) }
        for (name, plant) in plants {
            for suffix in ["", "-wal", "-shm", "-journal", "key"] {
                for fresh in [true, false] {
                    do { try assertPlantRefused(suffix: suffix, fresh: fresh, plant: plant) } catch { XCTFail("\(name) at '\(suffix)', fresh \(fresh): \(error)") }
                }
            }
            do { try assertPlantRefused(suffix: "", group: AccessGroup(name: "team"), fresh: false, plant: plant) } catch { XCTFail("\(name) at a shared database: \(error)") }
        }
    }

    /// A root shared by group 60000 (3770, root's), with the `users/` its owner makes (3770).
    private func makeGroupSharedRoot(_ temporary: TemporaryRoot, file: StaticString = #filePath, line: UInt = #line) -> (root: String, users: String) {
        let root = temporary.root
        let users = root + "/users"
        for directory in [root, users] {
            XCTAssertEqual(mkdir(directory, 0o700), 0, file: file, line: line)
            XCTAssertEqual(chown(directory, 0, 60_000), 0, file: file, line: line)
            XCTAssertEqual(chmod(directory, 0o3770), 0, file: file, line: line)
        }
        return (root, users)
    }
}
