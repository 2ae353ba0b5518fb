// Resolves libxml2's push parser with dlopen/dlsym on first use; see CXMLLoader.h.
#include "CXMLLoader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

// libxml2's xmlParserOption values (parser.h).
enum {
    IB_XML_PARSE_NOERROR = 1 << 5,
    IB_XML_PARSE_NOWARNING = 1 << 6,
    IB_XML_PARSE_NONET = 1 << 11,
};
// xmlSAXHandler.initialized for a SAX2 handler (XML_SAX2_MAGIC).
#define IB_XML_SAX2_MAGIC 0xDEEDBEAFu

// The leading fields of libxml2's struct _xmlError.
typedef struct {
    int domain;
    int code;
    char *message;
    int level;  // xmlErrorLevel: 1 warning, 2 error, 3 fatal
} ib_xml_error_head;

// libxml2 reports warnings (a relative namespace URI, XML 1.1, a bad xml:lang) through the
// same callback as errors; they do not make a document unreadable.
#define IB_XML_ERR_WARNING 1

typedef void (*ib_xml_any_callback)(void);
typedef void (*ib_xml_characters_callback)(void *, const unsigned char *, int);

// libxml2's struct _xmlSAXHandler: 27 SAX1 callbacks, `initialized`, `_private`, then the
// SAX2 element callbacks and the structured error callback. libxml2 copies the handler
// with its own sizeof, so `reserved` keeps that read inside this object should a later
// libxml2 append fields.
typedef struct {
    ib_xml_any_callback internal_subset, is_standalone, has_internal_subset, has_external_subset,
        resolve_entity, get_entity, entity_decl, notation_decl, attribute_decl, element_decl,
        unparsed_entity_decl, set_document_locator, start_document, end_document, start_element,
        end_element, reference;
    ib_xml_characters_callback characters, ignorable_whitespace;
    ib_xml_any_callback processing_instruction, comment, warning, error, fatal_error, get_parameter_entity;
    ib_xml_characters_callback cdata_block;
    ib_xml_any_callback external_subset;
    unsigned int initialized;
    void *private_data;
    void (*start_element_ns)(void *, const unsigned char *, const unsigned char *, const unsigned char *, int,
                             const unsigned char **, int, int, const unsigned char **);
    void (*end_element_ns)(void *, const unsigned char *, const unsigned char *, const unsigned char *);
    void (*serror)(void *, const ib_xml_error_head *);
    void *reserved[16];
} ib_xml_sax_handler;

typedef void *ib_xml_parser_context;

typedef struct {
    void (*init_parser)(void);
    ib_xml_parser_context (*create_push_parser)(ib_xml_sax_handler *, void *, const char *, int, const char *);
    int (*use_options)(ib_xml_parser_context, int);
    int (*parse_chunk)(ib_xml_parser_context, const char *, int, int);
    void (*stop_parser)(ib_xml_parser_context);
    void (*free_parser)(ib_xml_parser_context);
} ib_xml_api_table;

typedef struct {
    ib_xml_api_table table;
    int loaded;
    char error[256];
} ib_xml_state;

static ib_xml_state *ib_xml_state_storage(void) {
    static ib_xml_state state;
    return &state;
}

static void *ib_xml_symbol(void *library, const char *name, int *missing, char *error) {
    void *symbol = dlsym(library, name);
    if (symbol == NULL && !*missing) {
        *missing = 1;
        snprintf(error, 256, "libxml2 has no symbol %s", name);
    }
    return symbol;
}

static void ib_xml_load_once(void) {
    ib_xml_state *state = ib_xml_state_storage();
    // The soname every distribution ships; the unversioned name is libxml2-dev's symlink,
    // a fallback for unusual layouts.
    void *library = dlopen("libxml2.so.2", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) library = dlopen("libxml2.so", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        const char *reason = dlerror();
        snprintf(state->error, sizeof state->error, "libxml2 could not be loaded (%s); install libxml2", reason ? reason : "not found");
        return;
    }
    int missing = 0;
    ib_xml_api_table *t = &state->table;
#define IB_XML_RESOLVE(field, name) *(void **)(&t->field) = ib_xml_symbol(library, name, &missing, state->error)
    IB_XML_RESOLVE(init_parser, "xmlInitParser");
    IB_XML_RESOLVE(create_push_parser, "xmlCreatePushParserCtxt");
    IB_XML_RESOLVE(use_options, "xmlCtxtUseOptions");
    IB_XML_RESOLVE(parse_chunk, "xmlParseChunk");
    IB_XML_RESOLVE(stop_parser, "xmlStopParser");
    IB_XML_RESOLVE(free_parser, "xmlFreeParserCtxt");
#undef IB_XML_RESOLVE
    if (missing) return;
    // libxml2 wants its global state set up once before parsers run on several threads.
    t->init_parser();
    state->loaded = 1;
}

int ib_xml_load(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, ib_xml_load_once);
    return ib_xml_state_storage()->loaded;
}

const char *ib_xml_load_error(void) {
    return ib_xml_state_storage()->error;
}

// The SAX callbacks' user data: the caller's events and the context to stop.
typedef struct {
    const ib_xml_events *events;
    ib_xml_parser_context context;
    int stopped;
} ib_xml_parse_state;

static void ib_xml_stop(ib_xml_parse_state *state) {
    if (!state->stopped) {
        state->stopped = 1;
        ib_xml_state_storage()->table.stop_parser(state->context);
    }
}

static void ib_xml_start_element(void *user, const unsigned char *local_name, const unsigned char *prefix,
                                 const unsigned char *uri, int namespace_count, const unsigned char **namespaces,
                                 int attribute_count, int defaulted_count, const unsigned char **attributes) {
    (void)prefix, (void)uri, (void)namespace_count, (void)namespaces, (void)attribute_count, (void)defaulted_count,
        (void)attributes;
    ib_xml_parse_state *state = user;
    if (state->stopped) return;
    if (state->events->start_element(state->events->context, (const char *)local_name) != 0) ib_xml_stop(state);
}

static void ib_xml_end_element(void *user, const unsigned char *local_name, const unsigned char *prefix,
                               const unsigned char *uri) {
    (void)local_name, (void)prefix, (void)uri;
    ib_xml_parse_state *state = user;
    if (state->stopped) return;
    state->events->end_element(state->events->context);
}

static void ib_xml_characters(void *user, const unsigned char *bytes, int length) {
    ib_xml_parse_state *state = user;
    if (state->stopped) return;
    if (state->events->characters(state->events->context, (const char *)bytes, length) != 0) ib_xml_stop(state);
}

static void ib_xml_error(void *user, const ib_xml_error_head *error) {
    ib_xml_parse_state *state = user;
    if (state->stopped || error == NULL || error->level == IB_XML_ERR_WARNING) return;
    state->events->error(state->events->context, error->code != 0 ? error->code : -1);
}

int ib_xml_parse(const char *buffer, int size, const ib_xml_events *events) {
    const ib_xml_api_table *api = &ib_xml_state_storage()->table;
    ib_xml_sax_handler handler;
    memset(&handler, 0, sizeof handler);
    handler.initialized = IB_XML_SAX2_MAGIC;
    handler.start_element_ns = ib_xml_start_element;
    handler.end_element_ns = ib_xml_end_element;
    handler.characters = ib_xml_characters;
    handler.ignorable_whitespace = ib_xml_characters;
    handler.cdata_block = ib_xml_characters;
    handler.serror = ib_xml_error;
    ib_xml_parse_state state = {events, NULL, 0};
    ib_xml_parser_context context = api->create_push_parser(&handler, &state, NULL, 0, NULL);
    if (context == NULL) return -1;
    state.context = context;
    api->use_options(context, IB_XML_PARSE_NONET | IB_XML_PARSE_NOERROR | IB_XML_PARSE_NOWARNING);
    api->parse_chunk(context, buffer, size, 1);
    api->free_parser(context);
    return 0;
}

#ifdef IB_XML_ABI_CHECK
// Compiled only by scripts/check-libxml2-abi.sh, with libxml2's headers: the declarations
// above must match libxml2's own.
#include <libxml/parser.h>
#include <stddef.h>
#define IB_XML_SAME_OFFSET(mine, theirs) \
    _Static_assert(offsetof(ib_xml_sax_handler, mine) == offsetof(xmlSAXHandler, theirs), #theirs " moved")
IB_XML_SAME_OFFSET(characters, characters);
IB_XML_SAME_OFFSET(ignorable_whitespace, ignorableWhitespace);
IB_XML_SAME_OFFSET(cdata_block, cdataBlock);
IB_XML_SAME_OFFSET(external_subset, externalSubset);
IB_XML_SAME_OFFSET(initialized, initialized);
IB_XML_SAME_OFFSET(private_data, _private);
IB_XML_SAME_OFFSET(start_element_ns, startElementNs);
IB_XML_SAME_OFFSET(end_element_ns, endElementNs);
IB_XML_SAME_OFFSET(serror, serror);
_Static_assert(offsetof(ib_xml_sax_handler, reserved) == sizeof(xmlSAXHandler), "xmlSAXHandler grew");
_Static_assert(offsetof(xmlError, domain) == offsetof(ib_xml_error_head, domain), "xmlError.domain moved");
_Static_assert(offsetof(xmlError, code) == offsetof(ib_xml_error_head, code), "xmlError.code moved");
_Static_assert(offsetof(xmlError, level) == offsetof(ib_xml_error_head, level), "xmlError.level moved");
_Static_assert(sizeof(((xmlError *)0)->level) == sizeof(int), "xmlErrorLevel is not int-sized");
_Static_assert((int)XML_ERR_WARNING == IB_XML_ERR_WARNING, "XML_ERR_WARNING changed");
_Static_assert((int)XML_PARSE_NOERROR == (int)IB_XML_PARSE_NOERROR && (int)XML_PARSE_NOWARNING == (int)IB_XML_PARSE_NOWARNING
                   && (int)XML_PARSE_NONET == (int)IB_XML_PARSE_NONET, "xmlParserOption values changed");
_Static_assert(XML_SAX2_MAGIC == IB_XML_SAX2_MAGIC, "XML_SAX2_MAGIC changed");
// The function types (the table's with xmlParserCtxtPtr for the opaque context), through
// initialisations the compiler checks.
static void ib_xml_check_prototypes(void) {
    void (*init_parser)(void) = xmlInitParser;
    xmlParserCtxtPtr (*create)(xmlSAXHandlerPtr, void *, const char *, int, const char *) = xmlCreatePushParserCtxt;
    int (*use_options)(xmlParserCtxtPtr, int) = xmlCtxtUseOptions;
    int (*parse_chunk)(xmlParserCtxtPtr, const char *, int, int) = xmlParseChunk;
    void (*stop_parser)(xmlParserCtxtPtr) = xmlStopParser;
    void (*free_parser)(xmlParserCtxtPtr) = xmlFreeParserCtxt;
    startElementNsSAX2Func start = ib_xml_start_element;
    endElementNsSAX2Func end = ib_xml_end_element;
    charactersSAXFunc characters = ib_xml_characters;
    (void)init_parser, (void)create, (void)use_options, (void)parse_chunk, (void)stop_parser, (void)free_parser;
    (void)start, (void)end, (void)characters;
}
#endif
