// libcurl's headers (types and constants) for CCurlLoader, which loads the library
// itself on first use: this module deliberately links nothing.
#ifndef IDENTITY_BROKER_CLIBCURL_H
#define IDENTITY_BROKER_CLIBCURL_H

#include <curl/curl.h>

#endif
