// The system libsqlite3, plus wrappers for what Swift cannot import. Every wrapper
// carries the `ib_sqlite3_` prefix.
#ifndef IDENTITY_BROKER_CSQLITE_H
#define IDENTITY_BROKER_CSQLITE_H

#include <sqlite3.h>

// SQLITE_TRANSIENT is a cast of -1 to a function pointer, a macro Swift cannot import.
// Transient bindings make SQLite copy the bytes, so Swift arrays need not outlive the call.
static inline int ib_sqlite3_bind_blob_transient(sqlite3_stmt *statement, int index, const void *bytes, int count) {
    return sqlite3_bind_blob(statement, index, bytes, count, SQLITE_TRANSIENT);
}

static inline int ib_sqlite3_bind_text_transient(sqlite3_stmt *statement, int index, const char *text, int count) {
    return sqlite3_bind_text(statement, index, text, count, SQLITE_TRANSIENT);
}

#endif
