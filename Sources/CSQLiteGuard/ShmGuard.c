// See CSQLiteGuard.h.
#define _GNU_SOURCE
#include "CSQLiteGuard.h"
#include "UnixVFS.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// One writable shared mapping SQLite made: its address (0 when the slot is free), length,
// and the descriptor, file and offset it maps. The handler reads slots without a lock:
// `start` is written last when a slot is filled and cleared first when it is freed.
struct mapping {
    _Atomic uintptr_t start;
    size_t length;
    // The whole reservation: the file's pages and the zero pages after them.
    size_t reserved;
    int descriptor;
    dev_t device;
    ino_t inode;
    off_t offset;
};

// As many as the kernel lets a process map (vm.max_map_count is 65,530 by default), so an
// attacker who makes SQLite map many regions of a shared database cannot use up the table and
// leave a private database's mappings unrecorded. Untouched slots cost no memory.
#define MAPPING_SLOTS 65536

static struct mapping mappings[MAPPING_SLOTS];
// One past the highest slot ever used: the scans stop there.
static atomic_int slots_in_use;
static pthread_mutex_t mappings_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_ulong repairs;
static long page_size;

typedef void *(*mmap_function)(void *, size_t, int, int, int, off_t);
typedef int (*munmap_function)(void *, size_t);
static mmap_function original_mmap;
static munmap_function original_munmap;
static struct sigaction previous_action;

// Faults that come back at once, at the same page, on the same thread, with the file found
// whole each time (long enough, its blocks allocated): the page cannot be had (a disk full
// under a write, a failing device). Past a bound they go on, so that the process ends rather
// than spins for ever. A fault that found the file short again (a truncation, which is what
// an attacker repeats) starts the count over.
#define REPEATS_LIMIT 1000
#define REPEAT_WINDOW_NS 10000000L
static __thread uintptr_t last_fault_page __attribute__((tls_model("initial-exec")));
static __thread long last_fault_ns __attribute__((tls_model("initial-exec")));
static __thread int fault_repeats __attribute__((tls_model("initial-exec")));

static int record(void *address, size_t length, size_t reserved, int descriptor, off_t offset) {
    struct stat status;
    if (fstat(descriptor, &status) != 0) return 0;
    int recorded = 0;
    pthread_mutex_lock(&mappings_lock);
    int used = atomic_load(&slots_in_use);
    for (int index = 0; index < MAPPING_SLOTS; index++) {
        if (index < used && atomic_load(&mappings[index].start) != 0) continue;
        mappings[index].length = length;
        mappings[index].reserved = reserved;
        mappings[index].descriptor = descriptor;
        mappings[index].device = status.st_dev;
        mappings[index].inode = status.st_ino;
        mappings[index].offset = offset;
        atomic_store(&mappings[index].start, (uintptr_t)address);
        if (index >= used) atomic_store(&slots_in_use, index + 1);
        recorded = 1;
        break;
    }
    pthread_mutex_unlock(&mappings_lock);
    return recorded;
}

// Returns the reservation's length of the mapping at `address`, or 0 when none was recorded.
static size_t forget(void *address) {
    size_t reserved = 0;
    pthread_mutex_lock(&mappings_lock);
    int used = atomic_load(&slots_in_use);
    for (int index = 0; index < used; index++) {
        if (atomic_load(&mappings[index].start) == (uintptr_t)address) {
            atomic_store(&mappings[index].start, 0);
            reserved = mappings[index].reserved;
            break;
        }
    }
    pthread_mutex_unlock(&mappings_lock);
    return reserved;
}

// Zero pages readable past the end of every wal-index region SQLite maps. A wal-index hash
// slot holds a 16-bit frame index, and SQLite 3.40 (Debian 12's) reads `aPgno[slot - 1]`
// without checking it against the region's 4,096 entries: a member of a shared group who
// writes a slot past them (and a header with a valid checksum) makes the next lookup read up
// to 65,535 × 4 bytes past the start of the region's page numbers, beyond the 32 KiB mapping,
// into whatever lies there: another mapping (a wrong page number, which at worst fails the
// statement) or a page that faults and ends the process. Later releases mask the index. So
// each region is mapped at the start of a reservation long enough for the farthest such
// read, the rest of it private zero pages, read-only: a page number of 0 matches no page,
// and the lookup goes on as after a miss. Address space only: untouched zero pages cost no
// memory, touched ones share the kernel's zero page.
#define WAL_INDEX_OVERREAD (65536 * 4 + 4096)

static size_t overread_tail(size_t length) {
    size_t end = length + WAL_INDEX_OVERREAD;
    end = (end + (size_t)page_size - 1) & ~((size_t)page_size - 1);
    return end - length;
}

static void *guarded_mmap(void *address, size_t length, int protection, int flags, int descriptor, off_t offset) {
    if ((flags & MAP_SHARED) && descriptor >= 0 && !(protection & PROT_WRITE)) {
        // A read-only shared map: a wal-index SQLite could not open for writing (a member made
        // the file read-only to us), or the database file itself (`PRAGMA mmap_size`), which
        // growing would not be harmless. Truncated, either would end the process, so none is
        // made: SQLite reports an I/O error for the first and reads the second with read(2).
        errno = ENOMEM;
        return MAP_FAILED;
    }
    if (!(flags & MAP_SHARED) || descriptor < 0) return original_mmap(address, length, protection, flags, descriptor, offset);
    // A writable shared map is a wal-index region: SQLite places none at a fixed address, and
    // maps whole regions (so whole pages). `address` is only a hint, for the reservation.
    if ((flags & MAP_FIXED) || (length & ((size_t)page_size - 1)) != 0) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    size_t tail = overread_tail(length);
    void *reserved = original_mmap(address, length + tail, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (reserved == MAP_FAILED) return MAP_FAILED;
    void *result = original_mmap(reserved, length, protection, flags | MAP_FIXED, descriptor, offset);
    if (result == MAP_FAILED) {
        int saved = errno;
        original_munmap(reserved, length + tail);
        errno = saved;
        return MAP_FAILED;
    }
    if (!record(result, length, length + tail, descriptor, offset)) {
        // Unguarded, a truncation would end the process: SQLite reports an error instead.
        original_munmap(reserved, length + tail);
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return result;
}

static int guarded_munmap(void *address, size_t length) {
    // Forgotten first: once unmapped, the address may be handed to another mapping. A
    // recorded mapping goes with its zero pages.
    size_t reserved = forget(address);
    return original_munmap(address, reserved > length ? reserved : length);
}

// What the kernel would have done with the fault had the guard not been installed: the
// previous handler, with the signals it asked to have blocked and its own flags, or the
// default action.
static void pass_on(int signo, siginfo_t *info, void *context) {
    void *handler = (void *)previous_action.sa_handler;
    if (handler != (void *)SIG_DFL && handler != (void *)SIG_IGN) {
        if (previous_action.sa_flags & SA_RESETHAND) signal(signo, SIG_DFL);
        sigset_t blocked = previous_action.sa_mask, outer;
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
    if (info->si_code <= 0) {
        // Sent by a process: ignored, as it was before the guard, or its default action now.
        if (handler == (void *)SIG_IGN) return;
        signal(signo, SIG_DFL);
        raise(signo);
        return;
    }
    // A fault repeats when the handler returns, and then ends the process.
    signal(signo, SIG_DFL);
}

static long monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec * 1000000000L + now.tv_nsec;
}

enum repair { REPAIRED, FOUND_WHOLE, FAILED };

// Makes the mapping's file whole again under it: long enough, and with its blocks allocated
// (as SQLite allocates them when it extends the file), never shorter and with its data kept.
static enum repair make_whole(const struct mapping *mapping, uintptr_t start, uintptr_t address) {
    struct stat status;
    if (fstat(mapping->descriptor, &status) != 0) return FAILED;
    // The descriptor is SQLite's, so no rename in the directory can redirect this; the check
    // is for a descriptor that was closed and reused while still recorded.
    if (status.st_dev != mapping->device || status.st_ino != mapping->inode) return FAILED;
    off_t end = mapping->offset + (off_t)mapping->length;
    int result;
    // tmpfs gives up with EINTR whenever a signal is pending.
    int attempts = 0;
    do result = fallocate(mapping->descriptor, 0, mapping->offset, (off_t)mapping->length);
    while (result != 0 && errno == EINTR && ++attempts < 64);
    if (result != 0) {
        // No blocks to be had (a full disk or quota): long enough at least, which is all a
        // read needs on most file systems. A write, or a read on tmpfs, then ends the process.
        if (errno != EOPNOTSUPP && errno != ENOSYS && errno != ENOSPC && errno != EDQUOT) return FAILED;
        if (status.st_size < end) {
            attempts = 0;
            do result = ftruncate(mapping->descriptor, end);
            while (result != 0 && errno == EINTR && ++attempts < 64);
            if (result != 0) return FAILED;
        }
    }
    // A page that cannot be read now (an I/O error) will not be read by the access either.
    // End of file means the file was cut short again meanwhile: the access faults again.
    char byte;
    off_t page = mapping->offset + (off_t)((address - start) & ~((uintptr_t)page_size - 1));
    ssize_t read_result;
    attempts = 0;
    do read_result = pread(mapping->descriptor, &byte, 1, page);
    while (read_result < 0 && errno == EINTR && ++attempts < 64);
    if (read_result < 0) return FAILED;
    return status.st_size < end ? REPAIRED : FOUND_WHOLE;
}

static void on_bus_error(int signo, siginfo_t *info, void *context) {
    int saved = errno;
    // Only an access beyond the end of a mapped file (not a memory error, not a sent signal).
    if (info->si_code == BUS_ADRERR) {
        uintptr_t address = (uintptr_t)info->si_addr;
        int used = atomic_load(&slots_in_use);
        for (int index = 0; index < used; index++) {
            const struct mapping *mapping = &mappings[index];
            uintptr_t start = atomic_load(&mapping->start);
            if (start == 0 || address < start || address - start >= mapping->length) continue;
            enum repair repair = make_whole(mapping, start, address);
            if (repair == FAILED) break;
            uintptr_t page = address & ~((uintptr_t)page_size - 1);
            long now = monotonic_ns();
            int repeated = repair == FOUND_WHOLE && page == last_fault_page && now - last_fault_ns < REPEAT_WINDOW_NS;
            fault_repeats = repeated ? fault_repeats + 1 : (repair == FOUND_WHOLE ? 1 : 0);
            last_fault_page = page;
            last_fault_ns = now;
            if (fault_repeats >= REPEATS_LIMIT) break;
            if (repair == REPAIRED) atomic_fetch_add(&repairs, 1);
            errno = saved;
            return;
        }
    }
    errno = saved;
    pass_on(signo, info, context);
}

static int install_result = 0;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;

static void install(void) {
    sqlite3_vfs *unix_vfs = ib_replaceable_unix_vfs();
    // A build that maps the database file writable would have it recorded, and grown.
    if (unix_vfs == NULL || sqlite3_compileoption_used("SQLITE_MMAP_READWRITE")) {
        install_result = ENOSYS;
        return;
    }
    original_mmap = (mmap_function)unix_vfs->xGetSystemCall(unix_vfs, "mmap");
    original_munmap = (munmap_function)unix_vfs->xGetSystemCall(unix_vfs, "munmap");
    page_size = sysconf(_SC_PAGESIZE);
    if (original_mmap == NULL || original_munmap == NULL || page_size <= 0) {
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
    // The handler there now is read before ours replaces it, so a fault in between finds it.
    if (sigaction(SIGBUS, NULL, &previous_action) != 0 || sigaction(SIGBUS, &action, NULL) != 0) {
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
