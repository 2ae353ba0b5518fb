#ifndef C_PROCESS_SPAWN_H
#define C_PROCESS_SPAWN_H

#include <sys/types.h>

/// Where ``ib_spawn_bound`` failed: preparing the start (memory, descriptors, a process
/// limit, the parent-death signal), or running the command (the `PATH` lookup and `execve`).
enum { IB_SPAWN_PREPARING = 0, IB_SPAWN_RUNNING = 1 };

/// Starts `file` (looked up in this process's `PATH` when it has no slash, as glibc's `execvp`
/// does, without its `/bin/sh` retry on `ENOEXEC`, as `posix_spawnp`) with `argv` and `envp`,
/// and writes its process ID to `pid`. The command starts:
/// - with standard input, output and error and the descriptors in `keep` (`keep_count` of
///   them) open, and no other: descriptors this process opened without close-on-exec
///   (SwiftNIO's listening socket and epoll descriptors, a PostgreSQL pool's logged-in
///   connections) must never reach a command `federate exec` runs, while those `federate`
///   itself inherited (a `<(…)` pipe, `3>file`, make's jobserver, `LISTEN_FDS`) pass on. They
///   are closed in the child (`close_range`, else the list in `/proc/self/fd`, else every
///   number up to the descriptor limit), so one another thread opens meanwhile cannot leak;
/// - with an empty signal mask, each of the signals 1 to 31 at its default action except those
///   in `ignored` (`ignored_count`), which are ignored, and every real-time signal this
///   process handles at its default;
/// - on Linux, bound to this process: it gets SIGKILL when this process dies
///   (`PR_SET_PDEATHSIG`), so a `federate` killed with SIGKILL, or by the OOM killer, does not
///   leave behind a command whose SDK would next ask a port any local user may then take.
///   The signal follows the thread that forked, not the process, so the child is forked from
///   a thread started for it, which waits for it to end; a child whose parent died before the
///   binding took effect exits 127 at once. The kernel drops the binding when the command is
///   set-user-ID, set-group-ID or has file capabilities, or changes its credentials; what the
///   command starts in turn is not bound.
///
/// The child is forked with every signal blocked, and runs only async-signal-safe calls
/// before `execve` (glibc's `_Fork` where it has one, which runs no `pthread_atfork` handler).
/// `forked`, when not NULL, is called in this process as soon as the child exists.
///
/// Returns 0, or an `errno` value with `stage` telling where it came from: in
/// `IB_SPAWN_RUNNING`, the last `execve`'s, or EACCES when a candidate was found that could
/// not be run (ENOENT for an empty `file`). A command that could not be run has been reaped.
int ib_spawn_bound(pid_t *pid, int *stage, const char *file, char *const argv[], char *const envp[],
                   const int *keep, int keep_count, const int *ignored, int ignored_count, void (*forked)(void));

/// Writes to `out` (up to `capacity`) the descriptors from 3 up open in this process now, and
/// returns how many there are (which may exceed `capacity`). Where `/proc/self/fd` cannot be
/// listed, every number below the descriptor limit is asked instead.
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

/// Marks the command as started: signals from now on are recorded with 1. Give it to
/// ``ib_spawn_bound`` as `forked`, so the mark is made as soon as the child is in the process
/// group. A terminal's Ctrl-C recorded with 0 reached the process group
/// before the command was in it, so the command did not get it and it must be forwarded.
void ib_signal_relay_command_started(void);

/// Waits, up to half a second, until none of `signals` already sent to this process is still
/// waiting to be handled. Call before ``ib_signal_relay_uninstall`` once the command has
/// ended: the terminal's Ctrl-C that the command caught (and exited 42 on) reaches `federate`
/// too, and must not meet the default action (130) when the thread that takes it is slow to
/// run. (`sigpending` sees a signal pending for the process only while the calling thread
/// blocks it: Linux's rule, which this follows; elsewhere it may see none and return at once.)
void ib_signal_relay_settle(const int *signals, int count);

/// Puts each of `signals` back to its default action.
void ib_signal_relay_uninstall(const int *signals, int count);

/// `SI_KERNEL`, which Swift cannot see as a constant.
int ib_si_kernel(void);

/// 1 when `signo`'s disposition is SIG_IGN now, else 0.
int ib_signal_is_ignored(int signo);

#endif
