// The system libsqlite3, plus wrappers for what Swift cannot import. Every wrapper
// carries the `ib_sqlite3_` prefix.
#ifndef IDENTITY_BROKER_CSQLITE_H
#define IDENTITY_BROKER_CSQLITE_H

#include <sqlite3.h>
#ifdef __linux__
#include <sys/vfs.h>
#endif

// SQLITE_TRANSIENT is a cast of -1 to a function pointer, a macro Swift cannot import.
// Transient bindings make SQLite copy the bytes, so Swift arrays need not outlive the call.
static inline int ib_sqlite3_bind_blob_transient(sqlite3_stmt *statement, int index, const void *bytes, int count) {
    return sqlite3_bind_blob(statement, index, bytes, count, SQLITE_TRANSIENT);
}

static inline int ib_sqlite3_bind_text_transient(sqlite3_stmt *statement, int index, const char *text, int count) {
    return sqlite3_bind_text(statement, index, text, count, SQLITE_TRANSIENT);
}

// Settings every connection gets before its first statement (`sqlite3_db_config` is
// variadic, which Swift cannot call). A shared group's database is writable by every member
// of the Unix group, so its schema is input: a trigger or view a member planted would
// otherwise run inside every other member's process, with no bound on its CPU time.
// Triggers and views are switched off, SQL functions in the schema are limited to those
// without side effects, the schema cannot be edited through pragmas, and no string, blob or
// row may exceed `maximum_length` bytes (a member cannot make a reader allocate gigabytes).
// What a connection's authorizer reads: while `guarding`, SQLite compiling anything means a
// statement prepared earlier is being compiled again because the schema changed (a member
// of a shared group can change it at any time), so the compile is refused and `refused` set;
// the connection then checks the new schema before preparing the statement anew.
typedef struct {
    int guarding;
    int refused;
} ib_sqlite3_compile_guard;

static int ib_sqlite3_guard_authorizer(void *context, int action, const char *first, const char *second,
                                       const char *database, const char *trigger_or_view) {
    (void)action; (void)first; (void)second; (void)database; (void)trigger_or_view;
    ib_sqlite3_compile_guard *guard = (ib_sqlite3_compile_guard *)context;
    if (guard->guarding) {
        guard->refused = 1;
        return SQLITE_DENY;
    }
    return SQLITE_OK;
}

static inline int ib_sqlite3_install_compile_guard(sqlite3 *db, ib_sqlite3_compile_guard *guard) {
    return sqlite3_set_authorizer(db, ib_sqlite3_guard_authorizer, guard);
}

static inline int ib_sqlite3_harden(sqlite3 *db, int maximum_length) {
    int result = sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, (int *)0);
#ifdef SQLITE_DBCONFIG_ENABLE_VIEW
    if (result == SQLITE_OK) result = sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, (int *)0);
#else
    if (result == SQLITE_OK) result = SQLITE_ERROR;  // 3.31 or later is needed to refuse views
#endif
#ifdef SQLITE_DBCONFIG_TRUSTED_SCHEMA
    if (result == SQLITE_OK) result = sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)0);
#endif
    if (result == SQLITE_OK) result = sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)0);
    if (result == SQLITE_OK) {
        sqlite3_limit(db, SQLITE_LIMIT_LENGTH, maximum_length);
        // Loading a schema evaluates expressions before any check can read it: SQLite reads
        // `sqlite_stat1` right after, generated columns included. With no function arguments
        // allowed, a planted expression calling a function fails to parse instead of running
        // (see ib_sqlite3_allow_function_arguments), and a shallow expression depth bounds
        // what operators alone can do.
        sqlite3_limit(db, SQLITE_LIMIT_FUNCTION_ARG, 0);
        sqlite3_limit(db, SQLITE_LIMIT_EXPR_DEPTH, 64);
    }
    return result;
}

// Function arguments for the keystore's own statements, compiled against a schema already
// checked: on (`allow` non-zero) around such a compile, off again after it.
static inline void ib_sqlite3_allow_function_arguments(sqlite3 *db, int allow) {
    sqlite3_limit(db, SQLITE_LIMIT_FUNCTION_ARG, allow ? 8 : 0);
}

// The file-system type (`statfs`'s `f_type`, 32 bits) of `path` on Linux, or -1 when `statfs`
// fails or elsewhere:
// SQLiteKeystore warns of a database on a network file system, where WAL does not work
// across hosts. (Glibc's Swift module does not export `statfs`.)
static inline long long ib_file_system_type(const char *path) {
#ifdef __linux__
    struct statfs info;
    if (statfs(path, &info) != 0) return -1;
    return (long long)(unsigned int)info.f_type;
#else
    (void)path;
    return -1;
#endif
}

#endif
