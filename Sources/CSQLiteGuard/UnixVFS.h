// Shared by the guards: SQLite's `unix` VFS, whose system calls they replace.
#ifndef IB_UNIX_VFS_H
#define IB_UNIX_VFS_H

#include <stddef.h>
#include <sqlite3.h>

/// The `unix` VFS when its system calls can be read and replaced (a version 3 VFS with
/// `xGetSystemCall` and `xSetSystemCall`), else NULL: a build without them gets no guard.
static inline sqlite3_vfs *ib_replaceable_unix_vfs(void) {
    sqlite3_vfs *unix_vfs = sqlite3_vfs_find("unix");
    if (unix_vfs == NULL || unix_vfs->iVersion < 3 || unix_vfs->xGetSystemCall == NULL || unix_vfs->xSetSystemCall == NULL) {
        return NULL;
    }
    return unix_vfs;
}

#endif
