// A signal handler that records each signal with its si_code on a pipe (see the header).
#define _GNU_SOURCE
#include "CProcessSpawn.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

// Lock-free atomics rather than `volatile sig_atomic_t`: the handler runs on whichever thread
// the kernel picks, and `volatile` orders nothing between threads (ThreadSanitizer reported
// the handler's read of `relay_command_started` racing with the write that marks the
// command started, so a signal could be recorded as arriving before it).
static atomic_int relay_descriptor = -1;
static atomic_int relay_command_started = 0;

#if ATOMIC_INT_LOCK_FREE != 2
#error "the signal handler needs lock-free atomic ints"
#endif

static void relay(int signo, siginfo_t *info, void *context) {
    (void)context;
    int saved = errno;
    int record[3] = {
        signo, info != NULL ? info->si_code : 0, atomic_load_explicit(&relay_command_started, memory_order_acquire)
    };
    // 12 bytes: atomic on a pipe; a full non-blocking pipe drops the record.
    ssize_t ignored = write(atomic_load_explicit(&relay_descriptor, memory_order_acquire), record, sizeof record);
    (void)ignored;
    errno = saved;
}

int ib_signal_relay_install(int descriptor, const int *signals, int count) {
    atomic_store_explicit(&relay_descriptor, descriptor, memory_order_release);
    atomic_store_explicit(&relay_command_started, 0, memory_order_release);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = relay;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    for (int index = 0; index < count; index++) {
        if (sigaction(signals[index], &action, NULL) != 0) {
            return errno;
        }
    }
    return 0;
}

void ib_signal_relay_command_started(void) {
    atomic_store_explicit(&relay_command_started, 1, memory_order_release);
}

void ib_signal_relay_settle(const int *signals, int count) {
    // sigpending reports only what is blocked in the calling thread (a pending signal the
    // thread does not block would have been delivered to it): block them here meanwhile, so
    // that one pending for the process shows, and is left to the thread that takes it.
    sigset_t trapped, previous;
    sigemptyset(&trapped);
    for (int index = 0; index < count; index++) sigaddset(&trapped, signals[index]);
    pthread_sigmask(SIG_BLOCK, &trapped, &previous);
    struct timespec now, deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += 500000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000;
    }
    while (1) {
        sigset_t pending;
        int any = 0;
        if (sigpending(&pending) == 0) {
            for (int index = 0; index < count; index++) any |= sigismember(&pending, signals[index]) == 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (!any || now.tv_sec > deadline.tv_sec || (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec)) break;
        struct timespec pause = { .tv_sec = 0, .tv_nsec = 1000000 };
        nanosleep(&pause, NULL);
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
}

void ib_signal_relay_uninstall(const int *signals, int count) {
    for (int index = 0; index < count; index++) {
        (void)signal(signals[index], SIG_DFL);
    }
}

int ib_signal_is_ignored(int signo) {
    struct sigaction current;
    if (sigaction(signo, NULL, &current) != 0) return 0;
    return !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN;
}

int ib_si_kernel(void) {
#ifdef SI_KERNEL
    return SI_KERNEL;
#else
    // No kernel-sent code to recognise: an impossible si_code value.
    return 0x7fffffff;
#endif
}
