// The least a durable federation at c = 1 can do on the engines the brief prescribes, in C
// and nothing else: the storage targets' floor, as CacheHitFloor is the CLI's.
//
// One federation, as the client does it for a session it has not seen:
//   1. read the session from the store (it is not there),
//   2. GetId and GetCredentialsForIdentity against the canned Cognito (libcurl, one easy
//      handle kept alive; the answers are checked for a field, not parsed),
//   3. commit a sealed-session-sized record the way the engine's keystore does:
//      - sqlite: the keystore's schema and settings (WAL, synchronous=FULL, 4 KiB pages), its
//        versioned upsert and change-log row in one BEGIN IMMEDIATE ... COMMIT, on one
//        connection (the keystore reads on separate connections, which costs more);
//      - postgres: the keystore's own prepared statements (PostgresSchema.ReadOne and
//        ApplyDistinct: the conditional upsert and the NOTIFY in one autocommit statement),
//        through libpq (loaded with dlopen, so no headers are needed), with a second
//        connection LISTENing as the keystore's change feed does, drained after each commit.
//   memory does steps 2 only: the in-memory client's floor. append is the fsync floor of the
//   SQLite target (append a record of the same size, fdatasync), for a ratio from one run.
//
// No sealing, no JSON, no state machine, no Swift: a client that does the same work cannot
// go faster on this machine. compare.sh runs it beside the broker's storage rounds; the
// ratio each target asks for, computed on these figures, is the most any client can reach.
//
//   durable_federation_floor memory   ENDPOINT COUNT
//   durable_federation_floor sqlite   ENDPOINT COUNT DATABASE
//   durable_federation_floor postgres ENDPOINT COUNT CONNINFO
//   durable_federation_floor append   -        COUNT FILE
// prints one line: the operations per second. Every record written is FLOOR_RECORD_BYTES long
// (compare.sh passes the client's sealed-session size), 1301 without it.
//
// With FLOOR_CONCURRENCY=C (C > 1) memory, sqlite and postgres keep C federations in flight,
// as the broker's benchmark does at c = 64: one thread drives every transfer through libcurl's
// multi interface (as the broker's driver does), a reader thread serves the store reads of
// whoever is waiting in one go (SQLite: one read transaction; PostgreSQL: one `key = ANY`
// statement), and a writer thread commits whoever is waiting in one transaction (a group
// commit: SQLite's BEGIN IMMEDIATE ... COMMIT, PostgreSQL's ApplyDistinct with every key). A
// federation's slot starts its next one only once its commit returned.
#define _GNU_SOURCE
#include <curl/curl.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// A sealed session's size, as the fsync floor and pgbench use: $FLOOR_RECORD_BYTES, which
// compare.sh sets from the client's own (broker-bench record-bytes), else 1301.
static int RECORD_BYTES = 1301;

static double seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

static void fail(const char *what) {
    fprintf(stderr, "durable_federation_floor: %s\n", what);
    exit(1);
}

// MARK: Cognito through libcurl

struct answer { char data[8192]; size_t length; };

static size_t collect(char *bytes, size_t size, size_t count, void *context) {
    struct answer *answer = context;
    size_t n = size * count;
    if (answer->length + n >= sizeof answer->data) return 0;
    memcpy(answer->data + answer->length, bytes, n);
    answer->length += n;
    answer->data[answer->length] = 0;
    return n;
}

static CURL *curl;
static struct curl_slist *get_id_headers, *credentials_headers;
static struct answer answer;

static void post(struct curl_slist *headers, const char *body, const char *expect) {
    answer.length = 0;
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    if (curl_easy_perform(curl) != CURLE_OK || !strstr(answer.data, expect)) fail("Cognito did not answer as expected");
}

static const char *curl_endpoint;

// An easy handle for the canned Cognito, writing its answers into `into`.
static CURL *cognito_handle(struct answer *into) {
    CURL *easy = curl_easy_init();
    curl_easy_setopt(easy, CURLOPT_URL, curl_endpoint);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, into);
    curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
    return easy;
}

static const char *get_id_body =
    "{\"IdentityPoolId\":\"us-east-1:00000000-0000-4000-8000-000000000000\",\"Logins\":{\"accounts.google.com\":\"token\"}}";
static const char *credentials_body =
    "{\"IdentityId\":\"us-east-1:11111111-2222-4333-8444-555555555555\",\"Logins\":{\"accounts.google.com\":\"token\"}}";

static void cognito_setup(const char *endpoint) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    curl_endpoint = endpoint;
    curl = cognito_handle(&answer);
    const char *type = "Content-Type: application/x-amz-json-1.1";
    get_id_headers = curl_slist_append(curl_slist_append(NULL, type), "X-Amz-Target: AWSCognitoIdentityService.GetId");
    credentials_headers = curl_slist_append(
        curl_slist_append(NULL, type), "X-Amz-Target: AWSCognitoIdentityService.GetCredentialsForIdentity");
}

static void cognito_exchange(void) {
    post(get_id_headers, get_id_body, "\"IdentityId\"");
    post(credentials_headers, credentials_body, "\"SessionToken\"");
}

static unsigned char *record;

// MARK: SQLite, as SQLiteKeystore writes it

static sqlite3 *database;
static sqlite3_stmt *read_statement, *upsert_statement, *change_statement;

static void sqlite_check(int code, const char *what) {
    if (code != SQLITE_OK && code != SQLITE_DONE && code != SQLITE_ROW) {
        fprintf(stderr, "durable_federation_floor: %s: %s\n", what, sqlite3_errmsg(database));
        exit(1);
    }
}

static void sqlite_setup(const char *path) {
    sqlite_check(sqlite3_open_v2(path, &database, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW, NULL), "open");
    sqlite_check(sqlite3_exec(database,
        "PRAGMA page_size=4096; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
        "CREATE TABLE IF NOT EXISTS items(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, version INTEGER, value BLOB NOT NULL);"
        "CREATE TABLE IF NOT EXISTS changes(seq INTEGER PRIMARY KEY, key TEXT NOT NULL, origin INTEGER NOT NULL);",
        NULL, NULL, NULL), "schema");
    sqlite_check(sqlite3_prepare_v2(database, "SELECT value FROM items WHERE key = ?1", -1, &read_statement, NULL), "prepare");
    sqlite_check(sqlite3_prepare_v2(database,
        "INSERT INTO items(key, version, value) VALUES(?1, ?2, ?3) "
        "ON CONFLICT(key) DO UPDATE SET version = excluded.version, value = excluded.value "
        "WHERE items.version IS NULL OR excluded.version IS NULL OR items.version <= excluded.version",
        -1, &upsert_statement, NULL), "prepare");
    sqlite_check(sqlite3_prepare_v2(database, "INSERT INTO changes(key, origin) VALUES(?1, ?2)", -1, &change_statement, NULL), "prepare");
}

static void sqlite_read(const char *key) {
    sqlite3_bind_text(read_statement, 1, key, -1, SQLITE_STATIC);
    sqlite_check(sqlite3_step(read_statement), "read");
    sqlite3_reset(read_statement);
}

// The keystore's upsert and change-log row for one record, inside the caller's transaction.
static void sqlite_write(const char *key, long version) {
    sqlite3_bind_text(upsert_statement, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(upsert_statement, 2, version);
    sqlite3_bind_blob(upsert_statement, 3, record, RECORD_BYTES, SQLITE_STATIC);
    sqlite_check(sqlite3_step(upsert_statement), "upsert");
    sqlite3_reset(upsert_statement);
    sqlite3_bind_text(change_statement, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(change_statement, 2, 1);
    sqlite_check(sqlite3_step(change_statement), "change");
    sqlite3_reset(change_statement);
}

static void sqlite_commit(const char *key, long version) {
    sqlite_check(sqlite3_exec(database, "BEGIN IMMEDIATE", NULL, NULL, NULL), "begin");
    sqlite_write(key, version);
    sqlite_check(sqlite3_exec(database, "COMMIT", NULL, NULL, NULL), "commit");
}

// MARK: PostgreSQL through libpq, as PostgresKeystore writes it

typedef void PGconn;
typedef void PGresult;
typedef void PGnotify;
static PGconn *(*PQconnectdb)(const char *);
static int (*PQstatus)(const PGconn *);
static char *(*PQerrorMessage)(const PGconn *);
static PGresult *(*PQexec)(PGconn *, const char *);
static PGresult *(*PQprepare)(PGconn *, const char *, const char *, int, const void *);
static PGresult *(*PQexecPrepared)(PGconn *, const char *, int, const char *const *, const int *, const int *, int);
static int (*PQresultStatus)(const PGresult *);
static void (*PQclear)(PGresult *);
static int (*PQconsumeInput)(PGconn *);
static PGnotify *(*PQnotifies)(PGconn *);
static void (*PQfreemem)(void *);
enum { PGRES_COMMAND_OK = 1, PGRES_TUPLES_OK = 2 };

static PGconn *connection, *listener;

static void pg_check(PGresult *result, const char *what) {
    int status = PQresultStatus(result);
    PQclear(result);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
        fprintf(stderr, "durable_federation_floor: %s: %s\n", what, PQerrorMessage(connection));
        exit(1);
    }
}

static void *symbol(void *library, const char *name) {
    void *found = dlsym(library, name);
    if (!found) fail("libpq lacks a function");
    return found;
}

// The keystore's schema (PostgresSchema) and statements, word for word where it matters: the
// read by primary key, and the upsert, removes and NOTIFY in one statement.
static const char *pg_schema =
    "CREATE TABLE IF NOT EXISTS identity_broker_items (service text NOT NULL, access_group text NOT NULL, key text NOT NULL,"
    " version bigint, value bytea NOT NULL, PRIMARY KEY (service, access_group, key))";
static const char *pg_read = "SELECT value FROM identity_broker_items WHERE service = $1 AND access_group = $2 AND key = $3";
static const char *pg_apply =
    "WITH upserted AS ("
    " INSERT INTO identity_broker_items AS items (service, access_group, key, version, value)"
    " SELECT $1, $2, s.key, CASE WHEN s.versioned THEN s.version END, s.value"
    " FROM unnest($3::text[], $4::int8[], $5::bool[], $6::bytea[]) AS s(key, version, versioned, value)"
    " ON CONFLICT (service, access_group, key) DO UPDATE SET version = excluded.version, value = excluded.value"
    " WHERE items.version IS NULL OR excluded.version IS NULL OR items.version <= excluded.version"
    " RETURNING items.key"
    "), removed_one AS ("
    " DELETE FROM identity_broker_items WHERE service = $1 AND access_group = $2"
    " AND key = CASE WHEN cardinality($7::text[]) = 1 THEN ($7::text[])[1] END RETURNING key"
    "), removed_many AS ("
    " DELETE FROM identity_broker_items WHERE cardinality($7::text[]) > 1 AND service = $1 AND access_group = $2"
    " AND key = ANY($7::text[]) RETURNING key"
    "), removed AS (SELECT key FROM removed_one UNION ALL SELECT key FROM removed_many"
    "), changed AS ("
    " SELECT $8 || string_agg(length(c.key) || ':' || c.key, '') AS payload"
    " FROM (SELECT key FROM upserted UNION ALL SELECT key FROM removed) AS c HAVING count(*) > 0"
    ") SELECT (SELECT array_agg(key) FROM upserted), (SELECT array_agg(key) FROM removed),"
    " (SELECT count(*) FROM changed, pg_notify('identity_broker_changes', CASE"
    " WHEN octet_length(changed.payload) < 8000 THEN changed.payload ELSE $8 || '*' END) AS notified)";

static char *value_literal;

static void postgres_setup(const char *conninfo) {
    void *library = dlopen("libpq.so.5", RTLD_NOW);
    if (!library) fail("libpq.so.5 not found (apt install libpq5)");
    PQconnectdb = symbol(library, "PQconnectdb");
    PQstatus = symbol(library, "PQstatus");
    PQerrorMessage = symbol(library, "PQerrorMessage");
    PQexec = symbol(library, "PQexec");
    PQprepare = symbol(library, "PQprepare");
    PQexecPrepared = symbol(library, "PQexecPrepared");
    PQresultStatus = symbol(library, "PQresultStatus");
    PQclear = symbol(library, "PQclear");
    PQconsumeInput = symbol(library, "PQconsumeInput");
    PQnotifies = symbol(library, "PQnotifies");
    PQfreemem = symbol(library, "PQfreemem");
    connection = PQconnectdb(conninfo);
    listener = PQconnectdb(conninfo);
    if (PQstatus(connection) != 0 || PQstatus(listener) != 0) fail("cannot connect to PostgreSQL");
    pg_check(PQexec(listener, "LISTEN identity_broker_changes"), "listen");
    pg_check(PQexec(connection, pg_schema), "schema");
    pg_check(PQexec(connection, "SET plan_cache_mode = force_generic_plan"), "plan cache mode");
    pg_check(PQprepare(connection, "floor_read", pg_read, 0, NULL), "prepare read");
    pg_check(PQprepare(connection, "floor_apply", pg_apply, 0, NULL), "prepare apply");
    // bytea[] in text form: {"\\x…"} (the array's quoting takes one backslash).
    value_literal = malloc(2 * (size_t)RECORD_BYTES + 16);
    if (!value_literal) fail("out of memory");
    size_t n = (size_t)sprintf(value_literal, "{\"\\\\x");
    for (int i = 0; i < RECORD_BYTES; i++) n += (size_t)sprintf(value_literal + n, "%02x", record[i]);
    sprintf(value_literal + n, "\"}");
}

static char service[64];

static void postgres_read(const char *key) {
    const char *values[3] = {service, "", key};
    pg_check(PQexecPrepared(connection, "floor_read", 3, values, NULL, NULL, 0), "read");
}

static void postgres_commit(const char *key, long version) {
    char keys[96], versions[32];
    snprintf(keys, sizeof keys, "{%s}", key);
    snprintf(versions, sizeof versions, "{%ld}", version);
    const char *values[8] = {service, "", keys, versions, "{t}", value_literal, "{}", "1:0:floor:"};
    pg_check(PQexecPrepared(connection, "floor_apply", 8, values, NULL, NULL, 0), "apply");
    PQconsumeInput(listener);
    for (PGnotify *notify; (notify = PQnotifies(listener)) != NULL;) PQfreemem(notify);
}


// MARK: C federations in flight (FLOOR_CONCURRENCY)

enum step { STEP_READ, STEP_GET_ID, STEP_CREDENTIALS, STEP_COMMIT };

struct slot {
    CURL *easy;
    struct answer answer;
    enum step step;
    long index;
    char key[64];
    struct slot *next;  // in a worker's queue
};

static CURLM *multi;
static long total, started, finished;
static const char *engine;  // "memory", "sqlite" or "postgres"

// A thread that takes every slot waiting for it and serves them in one go, then hands them
// back to the driver (done list + curl_multi_wakeup).
struct worker {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct slot *waiting;
    void (*serve)(struct slot **slots, int count);
};

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot *done_list;

// Hands slots back to the driver, which moves them on in its next pass.
static void hand_back(struct slot **slots, int count) {
    pthread_mutex_lock(&done_lock);
    for (int i = 0; i < count; i++) {
        slots[i]->next = done_list;
        done_list = slots[i];
    }
    pthread_mutex_unlock(&done_lock);
}

static void worker_push(struct worker *worker, struct slot *slot) {
    pthread_mutex_lock(&worker->lock);
    slot->next = worker->waiting;
    worker->waiting = slot;
    pthread_cond_signal(&worker->wake);
    pthread_mutex_unlock(&worker->lock);
}

static void *worker_run(void *context) {
    struct worker *worker = context;
    struct slot *batch[1024];
    for (;;) {
        pthread_mutex_lock(&worker->lock);
        while (!worker->waiting) pthread_cond_wait(&worker->wake, &worker->lock);
        int count = 0;
        for (struct slot *slot = worker->waiting; slot && count < 1024; slot = slot->next) batch[count++] = slot;
        worker->waiting = NULL;
        pthread_mutex_unlock(&worker->lock);
        worker->serve(batch, count);
        hand_back(batch, count);
        curl_multi_wakeup(multi);
    }
    return NULL;
}

static struct worker reader = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL};
static struct worker writer = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL};

static sqlite3 *read_database;
static sqlite3_stmt *shared_read_statement;

static void sqlite_serve_reads(struct slot **slots, int count) {
    sqlite3_exec(read_database, "BEGIN", NULL, NULL, NULL);
    for (int i = 0; i < count; i++) {
        sqlite3_bind_text(shared_read_statement, 1, slots[i]->key, -1, SQLITE_STATIC);
        int code = sqlite3_step(shared_read_statement);
        if (code != SQLITE_DONE && code != SQLITE_ROW) fail("read");
        sqlite3_reset(shared_read_statement);
    }
    sqlite3_exec(read_database, "COMMIT", NULL, NULL, NULL);
}

static void sqlite_serve_commits(struct slot **slots, int count) {
    sqlite_check(sqlite3_exec(database, "BEGIN IMMEDIATE", NULL, NULL, NULL), "begin");
    for (int i = 0; i < count; i++) sqlite_write(slots[i]->key, slots[i]->index + 1);
    sqlite_check(sqlite3_exec(database, "COMMIT", NULL, NULL, NULL), "commit");
}

static PGconn *read_connection;
static const char *pg_read_many =
    "SELECT key, value FROM identity_broker_items WHERE service = $1 AND access_group = $2 AND key = ANY($3::text[])";

// "{k1,k2,…}" for count slots' keys.
static char *key_array(struct slot **slots, int count) {
    char *text = malloc((size_t)count * 68 + 4), *end = text;
    *end++ = '{';
    for (int i = 0; i < count; i++) end += sprintf(end, "%s%s", i ? "," : "", slots[i]->key);
    strcpy(end, "}");
    return text;
}

static void postgres_serve_reads(struct slot **slots, int count) {
    char *keys = key_array(slots, count);
    const char *values[3] = {service, "", keys};
    PGresult *result = PQexecPrepared(read_connection, "floor_read_many", 3, values, NULL, NULL, 0);
    if (PQresultStatus(result) != PGRES_TUPLES_OK) fail("read");
    PQclear(result);
    free(keys);
}

static void postgres_serve_commits(struct slot **slots, int count) {
    char *keys = key_array(slots, count);
    char *versions = malloc((size_t)count * 24 + 4), *flags = malloc((size_t)count * 2 + 4);
    // The values as a binary bytea[] (as postgres-nio sends them), not 2.6 KB of hex each.
    size_t binary_length = 20 + (size_t)count * (4 + RECORD_BYTES);
    unsigned char *binary = malloc(binary_length), *b = binary;
    uint32_t header[5] = {htonl(1), 0, htonl(17), htonl((uint32_t)count), htonl(1)};
    memcpy(b, header, sizeof header);
    b += sizeof header;
    char *v = versions, *f = flags;
    *v++ = '{'; *f++ = '{';
    for (int i = 0; i < count; i++) {
        v += sprintf(v, "%s%ld", i ? "," : "", slots[i]->index + 1);
        f += sprintf(f, "%st", i ? "," : "");
        uint32_t length = htonl(RECORD_BYTES);
        memcpy(b, &length, 4);
        memcpy(b + 4, record, RECORD_BYTES);
        b += 4 + RECORD_BYTES;
    }
    strcpy(v, "}"); strcpy(f, "}");
    const char *values[8] = {service, "", keys, versions, flags, (const char *)binary, "{}", "1:0:floor:"};
    int lengths[8] = {0, 0, 0, 0, 0, (int)binary_length, 0, 0};
    int formats[8] = {0, 0, 0, 0, 0, 1, 0, 0};
    pg_check(PQexecPrepared(connection, "floor_apply", 8, values, lengths, formats, 0), "apply");
    PQconsumeInput(listener);
    for (PGnotify *notify; (notify = PQnotifies(listener)) != NULL;) PQfreemem(notify);
    free(keys); free(versions); free(flags); free(binary);
}

static void slot_post(struct slot *slot, struct curl_slist *headers, const char *body) {
    slot->answer.length = 0;
    curl_easy_setopt(slot->easy, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(slot->easy, CURLOPT_POSTFIELDS, body);
    curl_multi_add_handle(multi, slot->easy);
}

// Moves a slot on from the step it just finished (or starts its next federation).
static void advance(struct slot *slot) {
    switch (slot->step) {
    case STEP_COMMIT:  // a federation finished (or the slot is new)
        if (slot->index >= 0) finished++;
        if (started >= total) { slot->index = -2; return; }
        slot->index = started++;
        snprintf(slot->key, sizeof slot->key, "%s-session-%ld", service, slot->index);
        slot->step = STEP_READ;
        if (strcmp(engine, "memory") != 0) { worker_push(&reader, slot); return; }
        // fall through: no store to read
    case STEP_READ:
        slot->step = STEP_GET_ID;
        slot_post(slot, get_id_headers, get_id_body);
        return;
    case STEP_GET_ID:
        if (!strstr(slot->answer.data, "\"IdentityId\"")) fail("Cognito did not answer as expected");
        slot->step = STEP_CREDENTIALS;
        slot_post(slot, credentials_headers, credentials_body);
        return;
    case STEP_CREDENTIALS:
        if (!strstr(slot->answer.data, "\"SessionToken\"")) fail("Cognito did not answer as expected");
        slot->step = STEP_COMMIT;
        if (strcmp(engine, "memory") != 0) { worker_push(&writer, slot); return; }
        // Restarted with the others the driver finished in this pass, as served slots are.
        hand_back(&slot, 1);
        return;
    }
}

static double run_concurrently(long count, int concurrency) {
    long warmup = count / 10;
    total = warmup + count;
    multi = curl_multi_init();
    curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)concurrency);
    if (strcmp(engine, "sqlite") == 0) {
        reader.serve = sqlite_serve_reads;
        writer.serve = sqlite_serve_commits;
    } else if (strcmp(engine, "postgres") == 0) {
        reader.serve = postgres_serve_reads;
        writer.serve = postgres_serve_commits;
    }
    if (reader.serve) {
        pthread_t thread;
        pthread_create(&thread, NULL, worker_run, &reader);
        pthread_create(&thread, NULL, worker_run, &writer);
    }
    struct slot *slots = calloc((size_t)concurrency, sizeof *slots);
    for (int i = 0; i < concurrency; i++) {
        slots[i].easy = cognito_handle(&slots[i].answer);
        curl_easy_setopt(slots[i].easy, CURLOPT_PRIVATE, &slots[i]);
        slots[i].step = STEP_COMMIT;
        slots[i].index = -1;
        advance(&slots[i]);
    }
    double start = 0;
    while (finished < total) {
        if (start == 0 && finished >= warmup) start = seconds();
        int running;
        curl_multi_perform(multi, &running);
        for (CURLMsg *message; (message = curl_multi_info_read(multi, &running)) != NULL;) {
            if (message->msg != CURLMSG_DONE) continue;
            if (message->data.result != CURLE_OK) fail("a request failed");
            struct slot *slot;
            curl_easy_getinfo(message->easy_handle, CURLINFO_PRIVATE, (char **)&slot);
            curl_multi_remove_handle(multi, message->easy_handle);
            advance(slot);
        }
        pthread_mutex_lock(&done_lock);
        struct slot *served = done_list;
        done_list = NULL;
        pthread_mutex_unlock(&done_lock);
        for (struct slot *slot = served, *next; slot; slot = next) {
            next = slot->next;
            advance(slot);
        }
        if (!served) curl_multi_poll(multi, NULL, 0, 1000, NULL);
    }
    return (double)(finished - warmup) / (seconds() - start);
}

// MARK: The runs

int main(int argc, char **argv) {
    if (argc < 4) fail("usage: durable_federation_floor memory|sqlite|postgres|append ENDPOINT COUNT [TARGET]");
    const char *mode = argv[1];
    long count = atol(argv[3]);
    if (count <= 0) fail("COUNT must be positive");
    const char *record_bytes_text = getenv("FLOOR_RECORD_BYTES");
    if (record_bytes_text && *record_bytes_text) RECORD_BYTES = atoi(record_bytes_text);
    if (RECORD_BYTES <= 0 || RECORD_BYTES > 1 << 20) fail("FLOOR_RECORD_BYTES must be 1 to 1048576");
    record = malloc((size_t)RECORD_BYTES);
    if (!record) fail("out of memory");
    srand((unsigned)time(NULL));
    for (int i = 0; i < RECORD_BYTES; i++) record[i] = (unsigned char)rand();
    snprintf(service, sizeof service, "floor-%ld-%d", (long)time(NULL), getpid());

    if (strcmp(mode, "append") == 0) {
        if (argc != 5) fail("append needs a file");
        int fd = open(argv[4], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
        if (fd < 0) fail("cannot open the file");
        // Untimed, as the client's own floor does: the file's first blocks allocated.
        for (int i = 0; i < 10; i++) {
            if (write(fd, record, (size_t)RECORD_BYTES) != RECORD_BYTES || fdatasync(fd) != 0) fail("write failed");
        }
        double start = seconds();
        for (long i = 0; i < count; i++) {
            if (write(fd, record, (size_t)RECORD_BYTES) != RECORD_BYTES || fdatasync(fd) != 0) fail("write failed");
        }
        printf("%.1f\n", (double)count / (seconds() - start));
        return 0;
    }

    int sqlite = strcmp(mode, "sqlite") == 0, postgres = strcmp(mode, "postgres") == 0;
    if (!sqlite && !postgres && strcmp(mode, "memory") != 0) fail("unknown mode");
    if ((sqlite || postgres) && argc != 5) fail("sqlite and postgres need a target");
    cognito_setup(argv[2]);
    if (sqlite) sqlite_setup(argv[4]);
    if (postgres) postgres_setup(argv[4]);

    const char *concurrency_text = getenv("FLOOR_CONCURRENCY");
    int concurrency = concurrency_text ? atoi(concurrency_text) : 1;
    if (concurrency > 1) {
        engine = mode;
        if (sqlite) {
            sqlite_check(sqlite3_open_v2(argv[4], &read_database, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW, NULL), "open");
            sqlite_check(sqlite3_prepare_v2(read_database, "SELECT value FROM items WHERE key = ?1", -1, &shared_read_statement, NULL), "prepare");
        }
        if (postgres) {
            read_connection = PQconnectdb(argv[4]);
            if (PQstatus(read_connection) != 0) fail("cannot connect to PostgreSQL");
            pg_check(PQexec(read_connection, "SET plan_cache_mode = force_generic_plan"), "plan cache mode");
            pg_check(PQprepare(read_connection, "floor_read_many", pg_read_many, 0, NULL), "prepare read");
        }
        printf("%.1f\n", run_concurrently(count, concurrency));
        return 0;
    }

    char key[64];
    long warmup = count / 10;
    double start = 0;
    for (long i = -warmup; i < count; i++) {
        if (i == 0) start = seconds();
        snprintf(key, sizeof key, "%s-session-%ld", service, i + warmup);
        if (sqlite) sqlite_read(key);
        if (postgres) postgres_read(key);
        cognito_exchange();
        if (sqlite) sqlite_commit(key, i + warmup + 1);
        if (postgres) postgres_commit(key, i + warmup + 1);
    }
    printf("%.1f\n", (double)count / (seconds() - start));
    return 0;
}
