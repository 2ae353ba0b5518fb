// Starting exec's command bound to this process, PR_SET_DUMPABLE, and the executables'
// start (see the header).
#define _GNU_SOURCE
#include "CProcessSpawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

// MARK: - Starting a command bound to this process

#ifdef __linux__
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#endif

/// A pipe whose two ends close at `execve`.
static int cloexec_pipe(int ends[2]) {
#ifdef __linux__
    return pipe2(ends, O_CLOEXEC);
#else
    if (pipe(ends) != 0) return -1;
    (void)fcntl(ends[0], F_SETFD, FD_CLOEXEC);
    (void)fcntl(ends[1], F_SETFD, FD_CLOEXEC);
    return 0;
#endif
}

/// `fork` without the `pthread_atfork` handlers where glibc has it (2.34): the child only
/// prepares and runs `execve`, and needs no library's state made consistent.
static pid_t fork_for_exec(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    return _Fork();
#else
    return fork();
#endif
}

/// What the thread that forks needs; lives on the caller's stack until the report is read.
struct spawn_request {
    char **candidates;      // paths to try in order (PATH lookup done before the fork)
    int candidate_count;
    char *const *argv;
    char *const *envp;
    int *keep;              // kept descriptors from 3 up, ascending, the status pipe among them
    int keep_count;
    int descriptor_ceiling; // the child's last close fallback goes up to this (found before the fork)
    const int *ignored;
    int ignored_count;
    pid_t parent;
    int report;             // write end of the pipe the outcome goes to the caller by
    void (*forked)(void);   // called in this process as soon as the child exists
};

struct spawn_outcome {
    pid_t pid;
    int code;
    int stage;
};

/// What the child reports when it could not run the command: the errno, and whether it came
/// from preparing the start (`IB_SPAWN_PREPARING`) or from the lookup and `execve`.
struct child_failure {
    int stage;
    int code;
};

static int contains(const int *values, int count, int value) {
    for (int index = 0; index < count; index++) {
        if (values[index] == value) return 1;
    }
    return 0;
}

/// The highest descriptor number worth trying, plus one: the soft limit, at most 2^20.
static int descriptor_ceiling(void) {
    struct rlimit limit;
    return getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < 1 << 20
        ? (int)limit.rlim_cur : 1 << 20;
}

/// Closes every descriptor from 3 up that is not kept. Only async-signal-safe calls: it runs
/// in the forked child of a multi-threaded process.
static void close_all_but(const int *keep, int count, int ceiling) {
#ifdef __linux__
    unsigned int low = 3;
    int ranges_closed = 1;
    for (int index = 0; index <= count && ranges_closed; index++) {
        unsigned int high = index < count ? (unsigned int)keep[index] - 1 : ~0U;
        if (index < count && (unsigned int)keep[index] < low) continue;
        if (high >= low && syscall(SYS_close_range, low, high, 0) != 0) ranges_closed = 0;
        if (index < count) low = (unsigned int)keep[index] + 1;
    }
    if (ranges_closed) return;
    // Kernels before 5.9: the open descriptors as /proc lists them, read with getdents64
    // (opendir allocates). Closing while listing is safe: entries are numbers, read in order.
    int directory = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (directory >= 0) {
        char buffer[4096] __attribute__((aligned(8)));
        long read_bytes;
        while ((read_bytes = syscall(SYS_getdents64, directory, buffer, sizeof buffer)) > 0) {
            for (long offset = 0; offset < read_bytes;) {
                struct linux_dirent64_view {
                    unsigned long long inode;
                    long long next;
                    unsigned short length;
                    unsigned char type;
                    char name[];
                } *entry = (void *)(buffer + offset);
                offset += entry->length;
                int fd = 0, digits = 0;
                for (const char *c = entry->name; *c >= '0' && *c <= '9'; c++, digits++) fd = fd * 10 + (*c - '0');
                if (digits == 0 || entry->name[digits] != '\0') continue;
                if (fd >= 3 && fd != directory && !contains(keep, count, fd)) close(fd);
            }
        }
        close(directory);
        if (read_bytes == 0) return;
    }
#endif
    // Neither: every number up to the limit.
    for (int fd = 3; fd < ceiling; fd++) {
        if (!contains(keep, count, fd)) close(fd);
    }
}

/// In the forked child: only async-signal-safe calls until `execve`.
static void run_child(const struct spawn_request *request, int status) {
    struct child_failure failure = { .stage = IB_SPAWN_PREPARING, .code = 0 };
#ifdef __linux__
    // Dies with the thread that forked it, which lives until the child ends: when `federate`
    // is killed, the command goes too instead of asking a port someone else may hold next.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
        failure.code = errno;
        goto failed;
    }
    // The parent may have died before the line above: then nothing would ever send it.
    if (getppid() != request->parent) _exit(127);
#endif
    for (int signo = 1; signo < 32; signo++) {
        if (signo == SIGKILL || signo == SIGSTOP) continue;
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = contains(request->ignored, request->ignored_count, signo) ? SIG_IGN : SIG_DFL;
        sigemptyset(&action.sa_mask);
        (void)sigaction(signo, &action, NULL);
    }
    // Real-time signals: a handler would run in the child once the mask is empty, before
    // `execve`; one ignored since `federate` started stays ignored, as across `execve`.
    // (glibc refuses 32 and 33, which it keeps for itself.)
    for (int signo = 32; signo < NSIG; signo++) {
        struct sigaction current;
        if (sigaction(signo, NULL, &current) != 0 || current.sa_handler == SIG_IGN || current.sa_handler == SIG_DFL) continue;
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = SIG_DFL;
        sigemptyset(&action.sa_mask);
        (void)sigaction(signo, &action, NULL);
    }
    close_all_but(request->keep, request->keep_count, request->descriptor_ceiling);
    sigset_t empty;
    sigemptyset(&empty);
    sigprocmask(SIG_SETMASK, &empty, NULL);
    // As glibc's execvp: a candidate that is missing, not a directory or on a vanished mount
    // passes to the next, EACCES is remembered, any other failure ends the search. Unlike
    // execvp, ENOEXEC does not retry with /bin/sh (neither does posix_spawnp).
    failure.stage = IB_SPAWN_RUNNING;
    int denied = 0;
    for (int index = 0; index < request->candidate_count; index++) {
        execve(request->candidates[index], request->argv, request->envp);
        failure.code = errno;
        if (failure.code == EACCES) {
            denied = 1;
        } else if (failure.code != ENOENT && failure.code != ENOTDIR && failure.code != ESTALE && failure.code != ENODEV && failure.code != ETIMEDOUT) {
            goto failed;
        }
    }
    if (denied) failure.code = EACCES;
failed:
    while (write(status, &failure, sizeof failure) < 0 && errno == EINTR) {}
    _exit(127);
}

/// Forks, reports to the caller, then stays until the child has ended (see the header).
static void *spawner(void *argument) {
    struct spawn_request *request = argument;
    int report = request->report;
    struct spawn_outcome outcome = { .pid = -1, .code = 0, .stage = IB_SPAWN_PREPARING };
    int status[2];
    if (cloexec_pipe(status) != 0) {
        outcome.code = errno;
    } else {
        // The status pipe's write end must survive the closing in the child, until execve.
        int kept = request->keep_count;
        request->keep[kept] = status[1];
        for (int index = kept; index > 0 && request->keep[index - 1] > request->keep[index]; index--) {
            int swap = request->keep[index - 1];
            request->keep[index - 1] = request->keep[index];
            request->keep[index] = swap;
        }
        request->keep_count = kept + 1;
        pid_t pid = fork_for_exec();
        if (pid == 0) {
            close(status[0]);
            run_child(request, status[1]);
        }
        int fork_error = errno;
        // From here on a Ctrl-C at the terminal reaches the child too (it is in the process
        // group, the signal pending until its mask clears).
        if (pid > 0 && request->forked != NULL) request->forked();
        close(status[1]);
        if (pid < 0) {
            outcome.code = fork_error;
        } else {
            struct child_failure failure = { .stage = IB_SPAWN_PREPARING, .code = 0 };
            ssize_t got;
            while ((got = read(status[0], &failure, sizeof failure)) < 0 && errno == EINTR) {}
            if (got == (ssize_t)sizeof failure) {
                int ignored;
                while (waitpid(pid, &ignored, 0) < 0 && errno == EINTR) {}
                outcome.code = failure.code != 0 ? failure.code : EINVAL;
                outcome.stage = failure.stage;
            } else {
                outcome.pid = pid;
            }
        }
        close(status[0]);
    }
    // The request belongs to the caller again once the outcome is written.
    ssize_t written;
    while ((written = write(report, &outcome, sizeof outcome)) < 0 && errno == EINTR) {}
    close(report);
    if (outcome.pid > 0) {
        siginfo_t info;
        while (waitid(P_PID, (id_t)outcome.pid, &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
    }
    return NULL;
}

/// The paths execvp would try for `file`, in order; `*error` is the errno for none.
static char **lookup_candidates(const char *file, int *count, int *error) {
    *count = 0;
    *error = ENOENT;
    if (file[0] == '\0') return NULL;
    if (strchr(file, '/') != NULL) {
        char **single = malloc(sizeof(char *));
        if (single == NULL || (single[0] = strdup(file)) == NULL) {
            free(single);
            *error = ENOMEM;
            return NULL;
        }
        *count = 1;
        return single;
    }
    const char *path = getenv("PATH");
    if (path == NULL) path = "/bin:/usr/bin";
    size_t entries = 1;
    for (const char *c = path; *c; c++) entries += *c == ':';
    char **candidates = calloc(entries, sizeof(char *));
    if (candidates == NULL) {
        *error = ENOMEM;
        return NULL;
    }
    size_t file_length = strlen(file);
    const char *start = path;
    for (size_t index = 0; index < entries; index++) {
        const char *end = strchr(start, ':');
        size_t length = end != NULL ? (size_t)(end - start) : strlen(start);
        // An empty entry is the current directory, as for execvp.
        char *candidate = malloc(length + file_length + 2);
        if (candidate == NULL) {
            for (int done = 0; done < *count; done++) free(candidates[done]);
            free(candidates);
            *count = 0;
            *error = ENOMEM;
            return NULL;
        }
        memcpy(candidate, start, length);
        size_t at = length;
        if (length > 0) candidate[at++] = '/';
        memcpy(candidate + at, file, file_length + 1);
        candidates[(*count)++] = candidate;
        start = end != NULL ? end + 1 : start + length;
    }
    return candidates;
}

static int ascending(const void *left, const void *right) {
    int a = *(const int *)left, b = *(const int *)right;
    return (a > b) - (a < b);
}

int ib_spawn_bound(pid_t *pid, int *stage, const char *file, char *const argv[], char *const envp[],
                   const int *keep, int keep_count, const int *ignored, int ignored_count, void (*forked)(void)) {
    *stage = IB_SPAWN_PREPARING;
    int lookup_error = ENOENT;
    struct spawn_request request = {
        .argv = argv, .envp = envp, .ignored = ignored, .ignored_count = ignored_count, .parent = getpid(), .forked = forked,
        // getrlimit is not on POSIX's async-signal-safe list: asked here, not in the child.
        .descriptor_ceiling = descriptor_ceiling(),
    };
    request.candidates = lookup_candidates(file, &request.candidate_count, &lookup_error);
    if (request.candidate_count == 0) {
        *stage = lookup_error == ENOMEM ? IB_SPAWN_PREPARING : IB_SPAWN_RUNNING;
        return lookup_error;
    }
    // One slot more for the status pipe the spawner adds.
    request.keep = malloc(sizeof(int) * (size_t)(keep_count + 1));
    int code = 0;
    int report[2] = { -1, -1 };
    if (request.keep == NULL) {
        code = ENOMEM;
        goto done;
    }
    for (int index = 0; index < keep_count; index++) {
        if (keep[index] >= 3 && !contains(request.keep, request.keep_count, keep[index])) {
            request.keep[request.keep_count++] = keep[index];
        }
    }
    qsort(request.keep, (size_t)request.keep_count, sizeof(int), ascending);
    if (cloexec_pipe(report) != 0) {
        code = errno;
        goto done;
    }
    request.report = report[1];
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    // Every signal blocked in the spawner, and so in the child until just before execve: no
    // handler of this process runs in either.
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pthread_t thread;
    code = pthread_create(&thread, &attributes, spawner, &request);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    pthread_attr_destroy(&attributes);
    if (code != 0) {
        close(report[1]);
        goto done;
    }
    struct spawn_outcome outcome = { .pid = -1, .code = EIO, .stage = IB_SPAWN_PREPARING };
    size_t received = 0;
    while (received < sizeof outcome) {
        ssize_t got = read(report[0], (char *)&outcome + received, sizeof outcome - received);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        received += (size_t)got;
    }
    code = received == sizeof outcome ? outcome.code : EIO;
    if (code == 0) *pid = outcome.pid;
    if (received == sizeof outcome) *stage = outcome.stage;
done:
    if (report[0] >= 0) close(report[0]);
    for (int index = 0; index < request.candidate_count; index++) free(request.candidates[index]);
    free(request.candidates);
    free(request.keep);
    return code;
}

/// Adds `fd` to what `ib_open_descriptors` found.
static void note_descriptor(int *out, int capacity, int *found, int fd) {
    if (*found < capacity) out[*found] = fd;
    (*found)++;
}

int ib_open_descriptors(int *out, int capacity) {
    DIR *directory = opendir("/proc/self/fd");
    if (directory == NULL) {
        directory = opendir("/dev/fd");
    }
    int found = 0;
    if (directory != NULL) {
        int own = dirfd(directory);
        struct dirent *entry;
        for (;;) {
            errno = 0;
            if ((entry = readdir(directory)) == NULL) break;
            char *end;
            long fd = strtol(entry->d_name, &end, 10);
            if (*end != '\0' || end == entry->d_name || fd < 3 || fd == own) {
                continue;
            }
            note_descriptor(out, capacity, &found, (int)fd);
        }
        int listed = errno == 0;
        closedir(directory);
        if (listed) return found;
    }
    // No listing (no /proc, or one that cannot be read): a descriptor the caller was given
    // must not be taken for one of its own and closed, so every number is asked.
    found = 0;
    int ceiling = descriptor_ceiling();
    for (int fd = 3; fd < ceiling; fd++) {
        if (fcntl(fd, F_GETFD) != -1) note_descriptor(out, capacity, &found, fd);
    }
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
