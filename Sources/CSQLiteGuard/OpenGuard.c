#include "CSQLiteGuard.h"
#include "UnixVFS.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int (*open_function)(const char *, int, int);

static open_function original_open;

/// `open` itself, for a call that finds the guard installed before `original_open` is seen.
static int plain_open(const char *path, int flags, int mode) {
    return open(path, flags, mode);
}

/// How long an open that a lease holds back is tried again: what a blocking open would wait
/// at most (the kernel breaks a lease after `lease-break-time`, 45 s by default), and a little.
#define LEASE_RETRY_NANOSECONDS (50LL * 1000 * 1000 * 1000)

/// The `unix` VFS's `open`: with `O_NONBLOCK` until the descriptor is known to be a regular
/// file or a directory (or one of the two devices SQLite opens itself), so that nothing a
/// group member puts where a `-wal`, `-shm` or `-journal` belongs, after the keystore's own
/// checks, can hold the process in `open` or in a later `read`.
static int guarded_open(const char *path, int flags, int mode) {
    open_function opener = original_open != NULL ? original_open : plain_open;
    // O_NOCTTY: a terminal reached some other way must not become the process's.
    int fd = opener(path, flags | O_NONBLOCK | O_NOCTTY, mode);
    // A non-blocking open that a lease holds back fails at once (the break is started); a
    // blocking one would wait for it. Wait the same way, without ever blocking in open.
    struct timespec pause = { .tv_sec = 0, .tv_nsec = 10 * 1000 * 1000 };
    for (long long waited = 0; fd < 0 && (errno == EWOULDBLOCK || errno == EAGAIN) && waited < LEASE_RETRY_NANOSECONDS;
         waited += pause.tv_nsec) {
        nanosleep(&pause, NULL);
        fd = opener(path, flags | O_NONBLOCK | O_NOCTTY, mode);
    }
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
    // Should this fail, O_NONBLOCK stays, which changes nothing for a regular file or a
    // directory; closing instead would drop every lock this process holds on the file.
    if ((flags & O_NONBLOCK) == 0) {
        int current = fcntl(fd, F_GETFL);
        if (current != -1) (void)fcntl(fd, F_SETFL, current & ~O_NONBLOCK);
    }
    return fd;
}

static int install_result = 0;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

static void install(void) {
    sqlite3_vfs *unix_vfs = ib_replaceable_unix_vfs();
    if (unix_vfs == NULL) {
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
