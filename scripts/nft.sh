#!/usr/bin/env bash
# nft.sh DEST: stages the host's nft binary (which the proxy drives through
# sigs.k8s.io/knftables), the shared libraries and loader it links and /etc/protocols
# under DEST, a root tree the kubelet image copies in, so its FROM scratch container
# can write nftables rules. Without nft on the host DEST stays empty: the image's proxy
# then says it cannot write rules and the kubelet runs without it.
set -euo pipefail
dest=$1
rm -rf "$dest"
mkdir -p "$dest"
nft=$(command -v nft || true)
[ -n "$nft" ] || nft=/usr/sbin/nft
if [ ! -x "$nft" ]; then
	echo "nft.sh: no nft on this host: the kubelet image will have no proxy (apt-get install nftables)" >&2
	exit 0
fi
install -D -m 0755 "$nft" "$dest/usr/sbin/nft"
# Every library ldd names, and the loader, at the same paths.
for lib in $(ldd "$nft" | awk '/=> \//{print $3} /^\t\//{print $1}'); do
	install -D -m 0755 "$(readlink -f "$lib")" "$dest$lib"
done
[ -f /etc/protocols ] && install -D -m 0644 /etc/protocols "$dest/etc/protocols"
exit 0
