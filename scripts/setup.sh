#!/usr/bin/env bash
# Installs what IdentityBroker needs on Debian/Ubuntu: the libcurl and OpenSSL
# development packages, and moto's server for the interop tests and the demo.
# Safe to run again; it only installs what is missing.
set -euo pipefail

sudo_if_needed() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for package in libcurl4-openssl-dev libssl-dev; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! python3 -c 'import moto.server, flask, flask_cors' 2>/dev/null; then
    echo "setup: installing moto[server]" >&2
    python3 -m pip install --quiet --disable-pip-version-check "moto[server]"
fi
echo "setup: libcurl, OpenSSL and moto are ready" >&2
