// Resolves libcurl's functions with dlopen/dlsym on first use; see CCurlLoader.h.
#include "CCurlLoader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

typedef struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    void (*easy_reset)(CURL *);
    curl_version_info_data *(*version_info)(CURLversion);
    const char *(*easy_strerror)(CURLcode);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_cleanup)(CURLM *);
    CURLMcode (*multi_add_handle)(CURLM *, CURL *);
    CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
    CURLMcode (*multi_perform)(CURLM *, int *);
    CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd *, unsigned int, int, int *);
    CURLMcode (*multi_wakeup)(CURLM *);
    CURLMsg *(*multi_info_read)(CURLM *, int *);
    const char *(*multi_strerror)(CURLMcode);
    CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    void (*free)(void *);
    CURLU *(*url)(void);
    void (*url_cleanup)(CURLU *);
    CURLUcode (*url_set)(CURLU *, CURLUPart, const char *, unsigned int);
    CURLUcode (*url_get)(const CURLU *, CURLUPart, char **, unsigned int);
} ib_curl_api_table;

typedef struct {
    ib_curl_api_table table;
    int loaded;
    char error[256];
} ib_curl_state;

static ib_curl_state *ib_curl_state_storage(void) {
    static ib_curl_state state;
    return &state;
}

static void *ib_curl_symbol(void *library, const char *name, int *missing, char *error) {
    void *symbol = dlsym(library, name);
    if (symbol == NULL && !*missing) {
        *missing = 1;
        snprintf(error, 256, "libcurl has no symbol %s (libcurl 7.85 or later is needed)", name);
    }
    return symbol;
}

static void ib_curl_load_once(void) {
    ib_curl_state *state = ib_curl_state_storage();
    // The soname Debian and every other distribution ship; the unversioned name is the
    // development symlink, a fallback for unusual layouts.
    void *library = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) library = dlopen("libcurl.so", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *reason = dlerror();
        snprintf(state->error, sizeof state->error, "libcurl could not be loaded (%s); install libcurl4", reason ? reason : "not found");
        return;
    }
    int missing = 0;
    ib_curl_api_table *t = &state->table;
#define IB_CURL_RESOLVE(field, name) *(void **)(&t->field) = ib_curl_symbol(library, name, &missing, state->error)
    IB_CURL_RESOLVE(global_init, "curl_global_init");
    IB_CURL_RESOLVE(easy_init, "curl_easy_init");
    IB_CURL_RESOLVE(easy_cleanup, "curl_easy_cleanup");
    IB_CURL_RESOLVE(easy_reset, "curl_easy_reset");
    IB_CURL_RESOLVE(easy_strerror, "curl_easy_strerror");
    IB_CURL_RESOLVE(easy_setopt, "curl_easy_setopt");
    IB_CURL_RESOLVE(easy_getinfo, "curl_easy_getinfo");
    IB_CURL_RESOLVE(multi_init, "curl_multi_init");
    IB_CURL_RESOLVE(multi_cleanup, "curl_multi_cleanup");
    IB_CURL_RESOLVE(multi_add_handle, "curl_multi_add_handle");
    IB_CURL_RESOLVE(multi_remove_handle, "curl_multi_remove_handle");
    IB_CURL_RESOLVE(multi_perform, "curl_multi_perform");
    IB_CURL_RESOLVE(multi_poll, "curl_multi_poll");
    IB_CURL_RESOLVE(multi_wakeup, "curl_multi_wakeup");
    IB_CURL_RESOLVE(multi_info_read, "curl_multi_info_read");
    IB_CURL_RESOLVE(multi_strerror, "curl_multi_strerror");
    IB_CURL_RESOLVE(multi_setopt, "curl_multi_setopt");
    IB_CURL_RESOLVE(slist_append, "curl_slist_append");
    IB_CURL_RESOLVE(slist_free_all, "curl_slist_free_all");
    IB_CURL_RESOLVE(free, "curl_free");
    IB_CURL_RESOLVE(url, "curl_url");
    IB_CURL_RESOLVE(url_cleanup, "curl_url_cleanup");
    IB_CURL_RESOLVE(url_set, "curl_url_set");
    IB_CURL_RESOLVE(url_get, "curl_url_get");
    IB_CURL_RESOLVE(version_info, "curl_version_info");
#undef IB_CURL_RESOLVE
    if (missing) return;
    // Every symbol can be there and the library still too old for an option every request
    // sets (CURLOPT_PROTOCOLS_STR, 7.85): then refuse here, with the reason, rather than
    // fail each request as an invalid one.
    const curl_version_info_data *info = t->version_info(CURLVERSION_NOW);
    if (info == NULL || info->version_num < 0x075500) {
        snprintf(state->error, sizeof state->error, "libcurl %s is too old; 7.85 or later is needed",
                 info != NULL && info->version != NULL ? info->version : "(unknown version)");
        return;
    }
    state->loaded = 1;
}

int ib_curl_load(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, ib_curl_load_once);
    return ib_curl_state_storage()->loaded;
}

const char *ib_curl_load_error(void) {
    return ib_curl_state_storage()->error;
}

static const ib_curl_api_table *ib_curl_api(void) {
    return &ib_curl_state_storage()->table;
}


CURLcode ib_curl_global_init(long flags) { return ib_curl_api()->global_init(flags); }
CURL *ib_curl_easy_init(void) { return ib_curl_api()->easy_init(); }
void ib_curl_easy_cleanup(CURL *handle) { ib_curl_api()->easy_cleanup(handle); }
void ib_curl_easy_reset(CURL *handle) { ib_curl_api()->easy_reset(handle); }
const char *ib_curl_easy_strerror(CURLcode code) { return ib_curl_api()->easy_strerror(code); }
CURLM *ib_curl_multi_init(void) { return ib_curl_api()->multi_init(); }
CURLMcode ib_curl_multi_cleanup(CURLM *multi) { return ib_curl_api()->multi_cleanup(multi); }
CURLMcode ib_curl_multi_add_handle(CURLM *multi, CURL *handle) { return ib_curl_api()->multi_add_handle(multi, handle); }
CURLMcode ib_curl_multi_remove_handle(CURLM *multi, CURL *handle) { return ib_curl_api()->multi_remove_handle(multi, handle); }
CURLMcode ib_curl_multi_perform(CURLM *multi, int *running) { return ib_curl_api()->multi_perform(multi, running); }
CURLMcode ib_curl_multi_poll(CURLM *multi, struct curl_waitfd *extra, unsigned int count, int timeout, int *ready) {
    return ib_curl_api()->multi_poll(multi, extra, count, timeout, ready);
}
CURLMcode ib_curl_multi_wakeup(CURLM *multi) { return ib_curl_api()->multi_wakeup(multi); }
CURLMsg *ib_curl_multi_info_read(CURLM *multi, int *queued) { return ib_curl_api()->multi_info_read(multi, queued); }
const char *ib_curl_multi_strerror(CURLMcode code) { return ib_curl_api()->multi_strerror(code); }
struct curl_slist *ib_curl_slist_append(struct curl_slist *list, const char *text) { return ib_curl_api()->slist_append(list, text); }
void ib_curl_slist_free_all(struct curl_slist *list) { ib_curl_api()->slist_free_all(list); }
void ib_curl_free(void *pointer) { ib_curl_api()->free(pointer); }
CURLU *ib_curl_url(void) { return ib_curl_api()->url(); }
void ib_curl_url_cleanup(CURLU *url) { ib_curl_api()->url_cleanup(url); }
CURLUcode ib_curl_url_set(CURLU *url, CURLUPart part, const char *content, unsigned int flags) {
    return ib_curl_api()->url_set(url, part, content, flags);
}
CURLUcode ib_curl_url_get(CURLU *url, CURLUPart part, char **content, unsigned int flags) {
    return ib_curl_api()->url_get(url, part, content, flags);
}
CURLcode ib_curl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return ib_curl_api()->easy_setopt(handle, option, value);
}
CURLcode ib_curl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return ib_curl_api()->easy_setopt(handle, option, value);
}
CURLcode ib_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return ib_curl_api()->easy_setopt(handle, option, value);
}
CURLcode ib_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return ib_curl_api()->easy_setopt(handle, option, value);
}
CURLcode ib_curl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return ib_curl_api()->easy_setopt(handle, option, value);
}
CURLcode ib_curl_easy_setopt_data_callback(CURL *handle, CURLoption option, ib_curl_data_callback value) {
    return ib_curl_api()->easy_setopt(handle, option, value);
}
CURLcode ib_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return ib_curl_api()->easy_getinfo(handle, info, value);
}
CURLcode ib_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    return ib_curl_api()->easy_getinfo(handle, info, value);
}
CURLMcode ib_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return ib_curl_api()->multi_setopt(handle, option, value);
}
