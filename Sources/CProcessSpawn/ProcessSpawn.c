// posix_spawn's close-from file action behind a prefixed name, and PR_SET_DUMPABLE (see the
// header).
#define _GNU_SOURCE
#include "CProcessSpawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
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
