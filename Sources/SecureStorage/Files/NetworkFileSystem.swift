import CSQLite

/// Network file systems, told apart by `statfs`'s file-system type: SQLite's WAL keeps its
/// index in memory shared by the processes of one host, so processes on two hosts that open
/// one database there each keep their own index and can corrupt it (sqlite.org, "WAL mode":
/// "WAL does not work over a network filesystem").
enum NetworkFileSystem {
    /// The kinds known by their `f_type` (the kernel's `*_SUPER_MAGIC` values). FUSE is left
    /// out: many FUSE file systems are local, and a warning that fires on them teaches people
    /// to ignore it.
    private static let kinds: [Int: String] = [
        0x6969: "nfs",
        0x517B: "smb",
        0xFF53_4D42: "cifs",
        0xFE53_4D42: "smb2",
        0x0102_1997: "9p",
        0x00C3_6400: "ceph",
        0x5346_414F: "afs",
        0x7375_7245: "coda",
        0x0BD0_0BD0: "lustre",
        0x0116_1970: "gfs2",
        0x7461_636F: "ocfs2",
    ]

    /// The network file system `f_type` names, or `nil` for any other.
    static func name(ofType type: Int) -> String? { kinds[type] }

    /// The network file system `path` is on, or `nil` when it is on another (or `statfs`
    /// fails: the check only adds a warning).
    static func name(ofFileSystemAt path: String) -> String? {
        let type = ib_file_system_type(path)
        return type < 0 ? nil : name(ofType: Int(type))
    }
}
