// libxml2's SAX2 parser, loaded on first use.
//
// STS answers in XML; nothing else does. Linking libxml2 would load it, ICU (libicuuc,
// libicudata), liblzma and libz into every process that links Federation, the `federate
// credentials` cache hit included (0.5 ms of a 2.2 ms no-op's start-up, measured). So, as
// for libcurl (CCurlLoader), the few functions are resolved with dlopen/dlsym once, the
// first time `ib_xml_load` is called.
//
// libxml2's headers live in /usr/include/libxml2, reachable only through pkg-config, and
// pkg-config would also link the library; so XMLLoader.c declares the two structures it
// touches, xmlSAXHandler (SAX2) and the leading `int`s of xmlError, as libxml2 2.6 and later
// define them (scripts/check-libxml2-abi.sh checks them against libxml2's own headers).
// SAX rather than a tree or the streaming reader: events come in document order as the
// bytes are parsed, so an error names the elements open where it happened.
// Every symbol carries the `ib_xml_` prefix.
#ifndef IDENTITY_BROKER_CXMLLOADER_H
#define IDENTITY_BROKER_CXMLLOADER_H

/// Loads libxml2 once; 1 when every function the broker uses is there, else 0 and
/// `ib_xml_load_error()` says why. `ib_xml_parse` requires 1 first.
int ib_xml_load(void);

/// Why `ib_xml_load` returned 0 (empty otherwise).
const char *ib_xml_load_error(void);

/// What the parser reports, in document order, to `context`. A callback that returns
/// non-zero stops the parse.
typedef struct {
    void *context;
    int (*start_element)(void *context, const char *local_name);
    void (*end_element)(void *context);
    int (*characters)(void *context, const char *bytes, int length);
    /// An error, with libxml2's code (xmlParserErrors); the parse may go on (recovered) or stop.
    void (*error)(void *context, int code);
} ib_xml_events;

/// Parses `size` bytes at `buffer` in one pass (libxml2's push parser), reporting to
/// `events`. Options: XML_PARSE_NONET (no network), XML_PARSE_NOERROR and
/// XML_PARSE_NOWARNING (no reports on stderr: they would quote the body); no DTD loading,
/// no entity substitution, libxml2's default size limits (no XML_PARSE_HUGE). Returns 0
/// when the parser ran, -1 when it could not be created (out of memory).
int ib_xml_parse(const char *buffer, int size, const ib_xml_events *events);

#endif
