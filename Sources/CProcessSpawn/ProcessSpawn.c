// posix_spawn's close-from file action behind a prefixed name, PR_SET_DUMPABLE, and the
// executables' start (see the header).
#define _GNU_SOURCE
#include "CProcessSpawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

static int is_kept(int fd, const int *keep, int count) {
    for (int index = 0; index < count; index++) {
        if (keep[index] == fd) {
            return 1;
        }
    }
    return 0;
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))

int ib_spawn_file_actions_close_except(posix_spawn_file_actions_t *actions, const int *keep, int count) {
    int highest = 2;
    for (int index = 0; index < count; index++) {
        if (keep[index] > highest) {
            highest = keep[index];
        }
    }
    // A close action for a descriptor that is not open is not an error (glibc ignores EBADF
    // within the table's range).
    for (int fd = 3; fd < highest; fd++) {
        if (!is_kept(fd, keep, count)) {
            int code = posix_spawn_file_actions_addclose(actions, fd);
            if (code != 0) {
                return code;
            }
        }
    }
    return posix_spawn_file_actions_addclosefrom_np(actions, highest + 1);
}

#else

int ib_spawn_file_actions_close_except(posix_spawn_file_actions_t *actions, const int *keep, int count) {
    (void)actions;
    DIR *directory = opendir("/proc/self/fd");
    if (directory == NULL) {
        directory = opendir("/dev/fd");
    }
    if (directory == NULL) {
        return errno;
    }
    int own = dirfd(directory);
    struct dirent *entry;
    while ((entry = readdir(directory)) != NULL) {
        char *end;
        long fd = strtol(entry->d_name, &end, 10);
        if (*end != '\0' || end == entry->d_name || fd < 3 || fd == own || is_kept((int)fd, keep, count)) {
            continue;
        }
        int flags = fcntl((int)fd, F_GETFD);
        if (flags >= 0) {
            (void)fcntl((int)fd, F_SETFD, flags | FD_CLOEXEC);
        }
    }
    closedir(directory);
    return 0;
}

#endif

int ib_open_descriptors(int *out, int capacity) {
    DIR *directory = opendir("/proc/self/fd");
    if (directory == NULL) {
        directory = opendir("/dev/fd");
    }
    if (directory == NULL) {
        return -1;
    }
    int own = dirfd(directory);
    int found = 0;
    struct dirent *entry;
    while ((entry = readdir(directory)) != NULL) {
        char *end;
        long fd = strtol(entry->d_name, &end, 10);
        if (*end != '\0' || end == entry->d_name || fd < 3 || fd == own) {
            continue;
        }
        if (found < capacity) {
            out[found] = (int)fd;
        }
        found++;
    }
    closedir(directory);
    return found;
}

int ib_make_undumpable(void) {
#ifdef __linux__
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 ? 0 : errno;
#else
    // Elsewhere the process stays dumpable (the brief targets Linux servers).
    return ENOSYS;
#endif
}

int ib_start_process(void) {
    int failure = 0;
    // In order: open() returns the lowest free number, which is then `fd` itself.
    for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) {
            continue;
        }
        // Not close-on-exec: `federate-server` and `exec`'s command inherit it as theirs.
        int opened = open("/dev/null", O_RDONLY);
        if (opened == -1) {
            if (failure == 0) failure = errno;
            continue;
        }
        if (opened != fd) {
            dup2(opened, fd);
            close(opened);
        }
    }
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR && failure == 0) failure = errno;
    int undumpable = ib_make_undumpable();
    if (undumpable != 0 && undumpable != ENOSYS && failure == 0) failure = undumpable;
    return failure;
}
