// eventfd(2) behind a prefixed name, for the transport's driver loop (see the header).
#include "CCurlLoader.h"

#ifdef __linux__
_Static_assert(IB_EFD_CLOEXEC == EFD_CLOEXEC, "IB_EFD_CLOEXEC must equal EFD_CLOEXEC");
_Static_assert(IB_EFD_NONBLOCK == EFD_NONBLOCK, "IB_EFD_NONBLOCK must equal EFD_NONBLOCK");

int ib_eventfd(unsigned int initval, int flags) {
    return eventfd(initval, flags);
}
#else
#include <errno.h>

int ib_eventfd(unsigned int initval, int flags) {
    (void)initval;
    (void)flags;
    errno = ENOSYS;
    return -1;
}
#endif
