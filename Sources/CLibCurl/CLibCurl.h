// Non-variadic wrappers around libcurl's variadic setters and getters, which Swift
// cannot call directly. Every symbol carries the `ib_curl_` prefix so it never
// collides with another package's shims (corelibs uses `CFURLSession_`).
#ifndef IDENTITY_BROKER_CLIBCURL_H
#define IDENTITY_BROKER_CLIBCURL_H

#include <curl/curl.h>

static inline CURLcode ib_curl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ib_curl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ib_curl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ib_curl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ib_curl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}

typedef size_t (*ib_curl_data_callback)(char *buffer, size_t size, size_t count, void *userdata);

static inline CURLcode ib_curl_easy_setopt_data_callback(CURL *handle, CURLoption option, ib_curl_data_callback value) {
    return curl_easy_setopt(handle, option, value);
}

typedef int (*ib_curl_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow);

static inline CURLcode ib_curl_easy_setopt_xferinfo_callback(CURL *handle, ib_curl_xferinfo_callback value) {
    return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, value);
}

static inline CURLcode ib_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLcode ib_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLMcode ib_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}

#endif
