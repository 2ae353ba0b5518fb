#ifndef C_PROCESS_SPAWN_H
#define C_PROCESS_SPAWN_H

#include <spawn.h>

/// Adds a file action that closes every descriptor from `lowest` up in the child, before it
/// runs its program. Descriptors the parent opened without close-on-exec (SwiftNIO's
/// listening socket and epoll descriptors, a PostgreSQL pool's logged-in connections) must
/// never reach a command `federate exec` runs.
///
/// glibc 2.34 and later: `posix_spawn_file_actions_addclosefrom_np`, race-free, declared only
/// with `_GNU_SOURCE`, so Swift cannot see it through Glibc: hence this shim. Elsewhere (older
/// glibc, musl) every open descriptor from `lowest` up is marked close-on-exec at the time of
/// the call instead; one another thread opens afterwards can still leak.
///
/// Returns 0, or an `errno` value.
int ib_spawn_file_actions_closefrom(posix_spawn_file_actions_t *actions, int lowest);

/// Traps each of `signals` with a handler that writes two `int`s to `descriptor`: the
/// signal number and the `si_code` it came with (`SI_KERNEL` when the terminal sent it to its
/// foreground process group, `SI_USER` from `kill`). The handler only calls `write(2)`, which
/// is async-signal-safe; `descriptor` should be the non-blocking write end of a pipe, so a
/// full pipe drops a record rather than blocking the handler.
///
/// `federate exec` forwards signals to its command this way, skipping those the terminal
/// already delivered to the command (it shares `federate`'s process group): otherwise one
/// Ctrl-C reaches the command twice, which tools such as Terraform read as "stop now".
///
/// Returns 0, or an `errno` value.
int ib_signal_relay_install(int descriptor, const int *signals, int count);

/// `SI_KERNEL`, which Swift cannot see as a constant.
int ib_si_kernel(void);

#endif
