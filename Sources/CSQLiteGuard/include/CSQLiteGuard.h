#ifndef IDENTITY_BROKER_CSQLITE_GUARD_H
#define IDENTITY_BROKER_CSQLITE_GUARD_H

/// Keeps a process alive when another process truncates the `-shm` file of a WAL database
/// it has open.
///
/// SQLite maps each WAL database's `-shm` file (its wal-index) into every process that uses
/// the database. In a shared access group every member of the Unix group may write that
/// file, so a member who truncates it made the next access to the mapping raise `SIGBUS`,
/// which ended every process that had the database open, private sessions and all.
///
/// The guard routes the `unix` VFS's `mmap` and `munmap` through wrappers that record each
/// writable shared mapping with SQLite's own descriptor for its file, and refuse a shared
/// mapping they cannot guard (a read-only one, or one the table cannot hold): SQLite reports
/// an I/O error, or reads the database file with read(2). `SIGBUS` is trapped: an access beyond
/// the end of a recorded mapping's file (`BUS_ADRERR`) makes the file whole again: long
/// enough and allocated (`fallocate`), never shorter, its remaining data kept; the access then
/// repeats. With no blocks to be had (a full disk or quota) it is only made long enough, and a
/// write to it then ends the process. What the truncation cut off reads as zeros. SQLite rebuilds a wal-index whose
/// header was cut off from the WAL; one whose header survived over zeroed hash tables can
/// make readers miss frames, as a member writing zeros into the file can. Any other fault (a
/// memory error, a page that cannot be read, one that keeps coming back at once although the
/// file is whole, a signal another process sent) goes on to the handler that was there before
/// (the Swift runtime's crash report) with the mask and flags it asked for, or to the default
/// action, as it would without the guard.
///
/// The wrapper also maps each wal-index region at the start of a reservation whose rest is
/// read-only zero pages, 65,536 × 4 bytes and a page long: SQLite 3.40 (Debian 12's) follows a
/// hash slot to `aPgno[slot - 1]` without checking it against the region's page numbers, so a
/// member who forges a slot (and a header with a valid checksum) made a lookup read up to
/// 256 KiB past the 32 KiB mapping, and end the process where no page was mapped there. A
/// zero read matches no page, and the lookup goes on as after a miss.
///
/// Install before the first database opens: mappings made before are not recorded. Returns 0,
/// or an `errno` value (`ENOSYS` when this SQLite has no `unix` VFS whose system calls can be
/// replaced). Installing again does nothing and returns the first result.
int ib_sqlite3_shm_guard_install(void);

/// How many faults the guard has repaired in this process, for tests and diagnostics.
unsigned long ib_sqlite3_shm_guard_repairs(void);

/// Keeps SQLite from opening anything but a regular file or a directory (and the
/// `/dev/null` and `/dev/urandom` it opens itself), wherever the path leads.
///
/// The keystore checks a database and its `-wal`, `-shm` and `-journal` before SQLite opens
/// them, but SQLite opens those again for every new connection, and in a shared group's
/// directory any member may replace them meanwhile. A FIFO there would hold the process: in
/// `open` when SQLite falls back to read-only (a FIFO the member owns and did not let others
/// write), or in a `read`. The guard routes the `unix` VFS's `open` through a wrapper that
/// opens with `O_NONBLOCK`, checks the descriptor with `fstat`, and refuses anything else
/// (`ENXIO`: SQLite reports `SQLITE_CANTOPEN`). Install before the first database opens.
/// Returns 0, or `ENOSYS` when this SQLite's system calls cannot be replaced; installing
/// again does nothing and returns the first result.
int ib_sqlite3_open_guard_install(void);

#endif
