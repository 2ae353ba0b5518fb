#ifndef C_PROCESS_SPAWN_H
#define C_PROCESS_SPAWN_H

#include <spawn.h>

/// Adds file actions that close, in the child, every descriptor from 3 up except those in
/// `keep` (`count` of them), before it runs its program. Descriptors the parent opened without
/// close-on-exec (SwiftNIO's listening socket and epoll descriptors, a PostgreSQL pool's
/// logged-in connections) must never reach a command `federate exec` runs; those `federate`
/// itself inherited (a `<(…)` pipe, `3>file`, make's jobserver, `LISTEN_FDS`) are the
/// command's as well, and pass on.
///
/// Everything above the highest kept descriptor is closed with glibc's
/// `posix_spawn_file_actions_addclosefrom_np` (2.34 and later; declared only with
/// `_GNU_SOURCE`, so Swift cannot see it through Glibc: hence this shim), which is race-free;
/// each gap below it gets its own close action. Elsewhere (older glibc, musl) every open
/// descriptor that is not kept is marked close-on-exec at the time of the call instead; one
/// another thread opens afterwards can still leak.
///
/// Returns 0, or an `errno` value.
int ib_spawn_file_actions_close_except(posix_spawn_file_actions_t *actions, const int *keep, int count);

/// Writes to `out` (up to `capacity`) the descriptors from 3 up open in this process now, and
/// returns how many there are (which may exceed `capacity`), or -1 with `errno` set.
int ib_open_descriptors(int *out, int capacity);

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0): a process of the same user, such
/// as the command `federate exec` runs, can then no longer read its memory or
/// `/proc/<pid>/environ`, which hold the keystore key. Returns 0, or an `errno` value.
int ib_make_undumpable(void);

/// What both `federate` executables do first thing in `main`, before any descriptor is
/// opened:
/// - standard descriptors closed at start (`>&-`, `2>&-`, `<&-`) are opened on `/dev/null`,
///   read-only: otherwise the next file or socket opened (the keystore's key, libcurl's event
///   descriptors) takes the number, and output meant for stdout or stderr lands in it; now
///   reads end at once and writes fail with `EBADF` (exit 1 for output, as documented);
/// - `SIGPIPE` is ignored: a write to a pipe whose reader has gone then fails with `EPIPE`
///   (exit 1 with one line) instead of killing the process in silence; `exec` starts its
///   command with the signal at its default (`ChildProcess`);
/// - ``ib_make_undumpable()``.
/// Returns 0, or the first `errno` value met.
int ib_start_process(void);

/// Traps each of `signals` with a handler that writes three `int`s to `descriptor`: the
/// signal number, the `si_code` it came with (`SI_KERNEL` when the terminal sent it to its
/// foreground process group, `SI_USER` from `kill`), and 1 when it came after
/// `ib_signal_relay_command_started`, else 0. The handler only calls `write(2)`, which
/// is async-signal-safe; `descriptor` should be the non-blocking write end of a pipe, so a
/// full pipe drops a record rather than blocking the handler.
///
/// `federate exec` forwards signals to its command this way, skipping those the terminal
/// already delivered to the command (it shares `federate`'s process group): otherwise one
/// Ctrl-C reaches the command twice, which tools such as Terraform read as "stop now".
///
/// Returns 0, or an `errno` value.
int ib_signal_relay_install(int descriptor, const int *signals, int count);

/// Marks the command as started: signals from now on are recorded with 1. Call when
/// `posix_spawn` has returned. A terminal's Ctrl-C recorded with 0 reached the process group
/// before the command was in it, so the command did not get it and it must be forwarded.
void ib_signal_relay_command_started(void);

/// Puts each of `signals` back to its default action (after the command has been reaped).
void ib_signal_relay_uninstall(const int *signals, int count);

/// `SI_KERNEL`, which Swift cannot see as a constant.
int ib_si_kernel(void);

/// 1 when `signo`'s disposition is SIG_IGN now, else 0.
int ib_signal_is_ignored(int signo);

#endif
