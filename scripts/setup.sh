#!/usr/bin/env bash
# Installs what IdentityBroker needs on Debian/Ubuntu: the libcurl, OpenSSL, SQLite and
# libxml2 development packages, PostgreSQL (the fleet engine's tests start their own server),
# moto's server for the interop tests and the demo, and boto3 and the AWS CLI as real
# consumers of credential_process and the credential server.
# Safe to run again; it only installs what is missing.
set -euo pipefail

sudo_if_needed() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for package in libcurl4-openssl-dev libssl-dev libsqlite3-dev libxml2-dev postgresql openssl; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v python3 >/dev/null || ! python3 -m pip --version >/dev/null 2>&1; then
    echo "setup: installing python3 and pip" >&2
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-pip >/dev/null
fi

# A per-user pip install (below) puts `aws` in the user base's bin, often not on PATH.
if user_base=$(python3 -m site --user-base 2>/dev/null); then PATH="$user_base/bin:$PATH"; fi
if ! python3 -c 'import moto.server, flask, flask_cors, boto3' 2>/dev/null || ! command -v aws >/dev/null; then
    echo "setup: installing moto[server], boto3 and the AWS CLI" >&2
    # A Debian-managed python3 refuses plain pip installs (PEP 668); the tests and
    # the demo run `python3 -m moto.server`, so install for this user in that case.
    python3 -m pip install --quiet --disable-pip-version-check "moto[server]" boto3 awscli 2>/dev/null \
        || python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages "moto[server]" boto3 awscli
fi
echo "setup: libcurl, OpenSSL, SQLite, libxml2, PostgreSQL, moto, boto3 and the AWS CLI are ready" >&2
