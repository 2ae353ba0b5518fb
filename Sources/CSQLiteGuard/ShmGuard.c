// See CSQLiteGuard.h.
#define _GNU_SOURCE
#include "CSQLiteGuard.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// One writable shared mapping SQLite made: its address (0 when the slot is free), length,
// and the descriptor and offset it maps. The handler reads slots without a lock: `start` is
// written last when a slot is filled and cleared first when it is freed.
struct mapping {
    _Atomic uintptr_t start;
    size_t length;
    int descriptor;
    off_t offset;
    // Faults inside this mapping that found its file long enough already (another process
    // grew it meanwhile). Past a few, the fault is not a truncation and goes on.
    atomic_int unexplained;
};

// Each namespace's database has a handful of 32 KiB regions; beyond this many the mapping
// is simply not recorded, and a fault in it goes on as without the guard.
#define MAPPING_SLOTS 4096
#define UNEXPLAINED_LIMIT 16

static struct mapping mappings[MAPPING_SLOTS];
static pthread_mutex_t mappings_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_ulong repairs;

typedef void *(*mmap_function)(void *, size_t, int, int, int, off_t);
typedef int (*munmap_function)(void *, size_t);
static mmap_function original_mmap;
static munmap_function original_munmap;
static struct sigaction previous_action;

static void record(void *address, size_t length, int descriptor, off_t offset) {
    pthread_mutex_lock(&mappings_lock);
    for (int index = 0; index < MAPPING_SLOTS; index++) {
        if (atomic_load(&mappings[index].start) != 0) continue;
        mappings[index].length = length;
        mappings[index].descriptor = descriptor;
        mappings[index].offset = offset;
        atomic_store(&mappings[index].unexplained, 0);
        atomic_store(&mappings[index].start, (uintptr_t)address);
        break;
    }
    pthread_mutex_unlock(&mappings_lock);
}

static void forget(void *address) {
    pthread_mutex_lock(&mappings_lock);
    for (int index = 0; index < MAPPING_SLOTS; index++) {
        if (atomic_load(&mappings[index].start) == (uintptr_t)address) {
            atomic_store(&mappings[index].start, 0);
            break;
        }
    }
    pthread_mutex_unlock(&mappings_lock);
}

static void *guarded_mmap(void *address, size_t length, int protection, int flags, int descriptor, off_t offset) {
    void *result = original_mmap(address, length, protection, flags, descriptor, offset);
    // The wal-index: shared and writable. A read-only map of the database file itself
    // (`PRAGMA mmap_size`) is not, and growing that file would not be harmless.
    if (result != MAP_FAILED && (flags & MAP_SHARED) && (protection & PROT_WRITE) && descriptor >= 0) {
        record(result, length, descriptor, offset);
    }
    return result;
}

static int guarded_munmap(void *address, size_t length) {
    // Forgotten first: once unmapped, the address may be handed to another mapping.
    forget(address);
    return original_munmap(address, length);
}

static void pass_on(int signo, siginfo_t *info, void *context) {
    int has_handler = (previous_action.sa_flags & SA_SIGINFO)
        ? previous_action.sa_sigaction != NULL
        : (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler != SIG_IGN);
    if (has_handler) {
        // With the signals it asked to have blocked while it runs, as the kernel would have
        // blocked them had it called that handler itself.
        sigset_t blocked, outer;
        blocked = previous_action.sa_mask;
        if (!(previous_action.sa_flags & SA_NODEFER)) sigaddset(&blocked, signo);
        pthread_sigmask(SIG_BLOCK, &blocked, &outer);
        if (previous_action.sa_flags & SA_SIGINFO) {
            previous_action.sa_sigaction(signo, info, context);
        } else {
            previous_action.sa_handler(signo);
        }
        pthread_sigmask(SIG_SETMASK, &outer, NULL);
        return;
    }
    // The default action: returning repeats the access, which faults again and ends the
    // process as it would have without the guard.
    signal(signo, SIG_DFL);
}

static void on_bus_error(int signo, siginfo_t *info, void *context) {
    int saved = errno;
    uintptr_t address = (uintptr_t)info->si_addr;
    for (int index = 0; index < MAPPING_SLOTS; index++) {
        struct mapping *mapping = &mappings[index];
        uintptr_t start = atomic_load(&mapping->start);
        if (start == 0 || address < start || address - start >= mapping->length) continue;
        off_t end = mapping->offset + (off_t)mapping->length;
        struct stat status;
        if (fstat(mapping->descriptor, &status) == 0 && status.st_size < end) {
            // Truncated under the mapping: grown back (zeros, as SQLite extends it), and the
            // access repeats against the file again.
            if (ftruncate(mapping->descriptor, end) == 0) {
                atomic_fetch_add(&repairs, 1);
                errno = saved;
                return;
            }
        } else if (atomic_fetch_add(&mapping->unexplained, 1) < UNEXPLAINED_LIMIT) {
            // Long enough: another process grew it between the fault and the check.
            errno = saved;
            return;
        }
        break;
    }
    errno = saved;
    pass_on(signo, info, context);
}

static int install_result = 0;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

static void install(void) {
    sqlite3_vfs *unix_vfs = sqlite3_vfs_find("unix");
    if (unix_vfs == NULL || unix_vfs->iVersion < 3 || unix_vfs->xGetSystemCall == NULL || unix_vfs->xSetSystemCall == NULL) {
        install_result = ENOSYS;
        return;
    }
    original_mmap = (mmap_function)unix_vfs->xGetSystemCall(unix_vfs, "mmap");
    original_munmap = (munmap_function)unix_vfs->xGetSystemCall(unix_vfs, "munmap");
    if (original_mmap == NULL || original_munmap == NULL) {
        install_result = ENOSYS;
        return;
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_bus_error;
    // On the alternate stack when the runtime set one up (as Swift's crash reporter does).
    // SIGBUS stays unblocked while it runs, so that the handler it passes a fault on to gets
    // the mask that one asked for: Swift's reads the crashed process's memory from a thread
    // it starts there, catching the SIGBUS a bad page raises, which a blocked SIGBUS turns
    // into the process's end.
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &previous_action) != 0) {
        install_result = errno;
        return;
    }
    // Both wrappers in place before either is used: unmapping a mapping made unrecorded is
    // harmless, while a recorded one must be forgotten when it goes.
    if (unix_vfs->xSetSystemCall(unix_vfs, "munmap", (sqlite3_syscall_ptr)guarded_munmap) != SQLITE_OK
        || unix_vfs->xSetSystemCall(unix_vfs, "mmap", (sqlite3_syscall_ptr)guarded_mmap) != SQLITE_OK) {
        unix_vfs->xSetSystemCall(unix_vfs, "munmap", (sqlite3_syscall_ptr)original_munmap);
        sigaction(SIGBUS, &previous_action, NULL);
        install_result = ENOSYS;
    }
}

int ib_sqlite3_shm_guard_install(void) {
    pthread_once(&install_once, install);
    return install_result;
}

unsigned long ib_sqlite3_shm_guard_repairs(void) {
    return atomic_load(&repairs);
}
