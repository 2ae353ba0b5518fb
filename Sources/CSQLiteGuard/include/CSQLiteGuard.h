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
/// writable shared mapping with SQLite's own descriptor for its file, and traps `SIGBUS`.
/// A fault inside a recorded mapping whose file is now shorter than the mapping grows the
/// file back to cover it (`ftruncate`, with zeros) and returns, so the access succeeds. A
/// zeroed wal-index is one SQLite knows: its header reads as uninitialised and the next
/// transaction rebuilds it from the WAL file, in every process alike. Any other fault goes
/// on to the handler that was there before (the Swift runtime's crash report, or the default
/// action), as it would without the guard.
///
/// Install before the first database opens: mappings made before are not recorded. Returns 0,
/// or an `errno` value (`ENOSYS` when this SQLite has no `unix` VFS whose system calls can be
/// replaced). Installing again does nothing and returns the first result.
int ib_sqlite3_shm_guard_install(void);

/// How many faults the guard has repaired in this process, for tests and diagnostics.
unsigned long ib_sqlite3_shm_guard_repairs(void);

#endif
