#include "CSQLiteGuard.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int (*open_function)(const char *, int, int);

static open_function original_open;

/// The `unix` VFS's `open`: with `O_NONBLOCK` until the descriptor is known to be a regular
/// file or a directory (or one of the two devices SQLite opens itself), so that nothing a
/// group member puts where a `-wal`, `-shm` or `-journal` belongs, after the keystore's own
/// checks, can hold the process in `open` or in a later `read`.
static int guarded_open(const char *path, int flags, int mode) {
    int fd = original_open(path, flags | O_NONBLOCK, mode);
    if (fd < 0) return fd;
    struct stat info;
    if (fstat(fd, &info) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    // SQLite opens /dev/urandom for randomness and /dev/null to fill descriptors 0 to 2.
    int device = S_ISCHR(info.st_mode) && (strcmp(path, "/dev/null") == 0 || strcmp(path, "/dev/urandom") == 0);
    if (!S_ISREG(info.st_mode) && !S_ISDIR(info.st_mode) && !device) {
        close(fd);
        errno = ENXIO;
        return -1;
    }
    if ((flags & O_NONBLOCK) == 0) {
        int current = fcntl(fd, F_GETFL);
        if (current == -1 || fcntl(fd, F_SETFL, current & ~O_NONBLOCK) == -1) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
    }
    return fd;
}

static int install_result = 0;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

static void install(void) {
    sqlite3_vfs *unix_vfs = sqlite3_vfs_find("unix");
    if (unix_vfs == NULL || unix_vfs->iVersion < 3 || unix_vfs->xGetSystemCall == NULL || unix_vfs->xSetSystemCall == NULL) {
        install_result = ENOSYS;
        return;
    }
    original_open = (open_function)unix_vfs->xGetSystemCall(unix_vfs, "open");
    if (original_open == NULL || unix_vfs->xSetSystemCall(unix_vfs, "open", (sqlite3_syscall_ptr)guarded_open) != SQLITE_OK) {
        install_result = ENOSYS;
    }
}

int ib_sqlite3_open_guard_install(void) {
    pthread_once(&install_once, install);
    return install_result;
}
