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

#endif
