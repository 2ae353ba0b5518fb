// posix_spawn's close-from file action behind a prefixed name (see the header).
#define _GNU_SOURCE
#include "CProcessSpawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))

int ib_spawn_file_actions_closefrom(posix_spawn_file_actions_t *actions, int lowest) {
    return posix_spawn_file_actions_addclosefrom_np(actions, lowest);
}

#else

int ib_spawn_file_actions_closefrom(posix_spawn_file_actions_t *actions, int lowest) {
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
        if (*end != '\0' || end == entry->d_name || fd < lowest || fd == own) {
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
