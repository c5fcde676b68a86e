#!/bin/bash
# Fetch Debian 12's stock kernel package (pinned) into .cache/vm/ and unpack it there:
# nothing is installed system-wide. Idempotent; `make setup` runs it, the VM test layer
# only reads the result (scripts/vm/run.py). Needs apt-get (Debian 12 archive in
# sources.list); the package is the one `linux-image-amd64` depends on in bookworm.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # depmod, for a user whose PATH lacks them

PACKAGE=linux-image-6.1.0-50-amd64
VERSION=6.1.176-1
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${GROUPER_VM_CACHE:-$ROOT/.cache/vm}"
DEST="$CACHE/$PACKAGE-$VERSION"

if [ -f "$DEST/.unpacked" ]; then
    exit 0
fi
mkdir -p "$CACHE"
cd "$CACHE"
if ! ls "${PACKAGE}_${VERSION}"_*.deb >/dev/null 2>&1; then
    # a fresh machine's package index may not know the version yet: update once
    apt-get download -q "$PACKAGE=$VERSION" 2>/dev/null || { apt-get update -q >/dev/null; \
    apt-get download -q "$PACKAGE=$VERSION"; } || {
        echo "fetch-kernel: cannot download $PACKAGE=$VERSION (apt-get update? is the" \
            "version still in the archive? snapshot.debian.org keeps every version)" >&2
        exit 1
    }
fi
rm -rf "$DEST.tmp"
dpkg-deb -x "${PACKAGE}_${VERSION}"_*.deb "$DEST.tmp"
# the package's postinst would run depmod; modprobe in the guest needs modules.dep
depmod -b "$DEST.tmp" "${PACKAGE#linux-image-}"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
touch "$DEST/.unpacked"
echo "fetch-kernel: $DEST"
