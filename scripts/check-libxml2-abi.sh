#!/usr/bin/env bash
# Sources/CXMLLoader declares the part of libxml2 it uses itself (libxml2's headers need
# pkg-config, which would also link libxml2 into every process; see CXMLLoader.h). This
# compiles those declarations against libxml2's own headers (libxml2-dev) and fails when
# they differ. Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
flags=$(pkg-config --cflags libxml-2.0 2>/dev/null || echo -I/usr/include/libxml2)
# Swift's Debian images ship the toolchain's clang but not always a `cc`.
compiler=${CC:-$(command -v cc || command -v gcc || command -v clang || true)}
if [ -z "$compiler" ]; then
    echo "libxml2 ABI: no C compiler found (cc, gcc or clang); install one or set CC" >&2
    exit 1
fi
# shellcheck disable=SC2086
"$compiler" -std=gnu11 -Wall -Werror -Wno-unused-function -DIB_XML_ABI_CHECK $flags -ISources/CXMLLoader/include \
    -fsyntax-only Sources/CXMLLoader/XMLLoader.c
echo "libxml2 ABI: Sources/CXMLLoader matches $(pkg-config --modversion libxml-2.0 2>/dev/null || echo 'the installed headers')" >&2
