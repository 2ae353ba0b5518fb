// libcurl, loaded on first use.
//
// IdentityBroker does not link libcurl: a process that never reaches the network (the
// `federate credentials` cache hit, run by AWS SDKs before every call) must not pay for
// loading libcurl and the thirty-odd libraries it pulls in (GnuTLS, Kerberos, LDAP,
// libssh2, …) at start-up. Every libcurl function the broker uses is resolved with
// dlopen/dlsym into one table, once, the first time `ib_curl_load` is called
// (CurlLoader.c). <curl/curl.h> is included for its types and constants only.
//
// Swift cannot call libcurl's variadic setters and getters either, so the wrappers are
// also the non-variadic shims (one per argument type). Every symbol carries the
// `ib_curl_` prefix so it never collides with another package's shims.
#ifndef IDENTITY_BROKER_CCURLLOADER_H
#define IDENTITY_BROKER_CCURLLOADER_H

#include <curl/curl.h>

/// Loads libcurl once; 1 when every function the broker uses is there, else 0 and
/// `ib_curl_load_error()` says why. Every other `ib_curl_` function requires 1 first.
int ib_curl_load(void);

/// Why `ib_curl_load` returned 0 (empty otherwise).
const char *ib_curl_load_error(void);

typedef size_t (*ib_curl_data_callback)(char *buffer, size_t size, size_t count, void *userdata);

CURLcode ib_curl_global_init(long flags);
CURL *ib_curl_easy_init(void);
void ib_curl_easy_cleanup(CURL *handle);
void ib_curl_easy_reset(CURL *handle);
const char *ib_curl_easy_strerror(CURLcode code);
CURLM *ib_curl_multi_init(void);
CURLMcode ib_curl_multi_cleanup(CURLM *multi);
CURLMcode ib_curl_multi_add_handle(CURLM *multi, CURL *handle);
CURLMcode ib_curl_multi_remove_handle(CURLM *multi, CURL *handle);
CURLMcode ib_curl_multi_perform(CURLM *multi, int *running);
CURLMcode ib_curl_multi_poll(CURLM *multi, struct curl_waitfd *extra, unsigned int count, int timeout, int *ready);
CURLMcode ib_curl_multi_wakeup(CURLM *multi);
CURLMsg *ib_curl_multi_info_read(CURLM *multi, int *queued);
const char *ib_curl_multi_strerror(CURLMcode code);
struct curl_slist *ib_curl_slist_append(struct curl_slist *list, const char *text);
void ib_curl_slist_free_all(struct curl_slist *list);
void ib_curl_free(void *pointer);
CURLU *ib_curl_url(void);
void ib_curl_url_cleanup(CURLU *url);
CURLUcode ib_curl_url_set(CURLU *url, CURLUPart part, const char *content, unsigned int flags);
CURLUcode ib_curl_url_get(CURLU *url, CURLUPart part, char **content, unsigned int flags);
CURLcode ib_curl_easy_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode ib_curl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value);
CURLcode ib_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value);
CURLcode ib_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value);
CURLcode ib_curl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value);
CURLcode ib_curl_easy_setopt_data_callback(CURL *handle, CURLoption option, ib_curl_data_callback value);
CURLcode ib_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value);
CURLcode ib_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value);
CURLMcode ib_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value);

// The driver loop's wake-up descriptor. Not libcurl, but the transport's only other C need:
// the Glibc module does not import <sys/eventfd.h>, so it is included here (as swift-nio's
// CNIOLinux does) behind a prefixed wrapper (EventFD.c). The flags are literals, which Swift
// imports, and EventFD.c checks they equal EFD_CLOEXEC and EFD_NONBLOCK. Without eventfd
// (not Linux) the wrapper returns -1 (ENOSYS) and the driver uses curl_multi_wakeup.
#ifdef __linux__
#include <sys/eventfd.h>
#endif
#define IB_EFD_CLOEXEC 02000000
#define IB_EFD_NONBLOCK 04000
int ib_eventfd(unsigned int initval, int flags);

#endif
