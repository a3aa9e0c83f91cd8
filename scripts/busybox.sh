#!/usr/bin/env bash
# busybox.sh DEST: puts a static busybox at DEST, from Debian's busybox-static package
# (apt-get download + dpkg -x, so nothing is installed on the host). Kept if DEST exists.
set -euo pipefail
dest=$1
[ -x "$dest" ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# apt-get download needs the package lists; a fresh machine may have none yet.
apt-get download busybox-static >/dev/null 2>&1 || { apt-get update -qq && apt-get download busybox-static; }
dpkg -x busybox-static_*.deb root
install -m 0755 root/bin/busybox "$dest"
