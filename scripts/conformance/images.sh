#!/usr/bin/env bash
# images.sh: the test images Kubernetes' $K8S_VERSION (v1.32.4) conformance suite runs,
# built here without a registry and tagged with the exact names the suite uses, so that
# e2e.test runs unmodified. Each image is written as a docker-archive that
# `ctr -n k8s.io images import FILE` loads (Debian's containerd 1.6), into
# $CONFORMANCE_DIR/images/ (the directory scripts/conformance/build.sh fills):
#
#   agnhost-2.53.tar          registry.k8s.io/e2e-test-images/agnhost:2.53
#   busybox-1.36.1-1.tar      registry.k8s.io/e2e-test-images/busybox:1.36.1-1
#   httpd-2.4.38-4.tar        registry.k8s.io/e2e-test-images/httpd:2.4.38-4
#   httpd-2.4.39-4.tar        registry.k8s.io/e2e-test-images/httpd:2.4.39-4
#   nginx-1.14-4.tar          registry.k8s.io/e2e-test-images/nginx:1.14-4
#   nginx-1.15-4.tar          registry.k8s.io/e2e-test-images/nginx:1.15-4
#   jessie-dnsutils-1.7.tar   registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7
#   pause-3.10.tar            registry.k8s.io/pause:3.10
#   nautilus-1.7.tar          registry.k8s.io/e2e-test-images/nautilus:1.7
#   nonewprivs-1.3.tar        registry.k8s.io/e2e-test-images/nonewprivs:1.3
#   sample-apiserver-1.29.2.tar registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2
#   etcd-3.5.16-0.tar         registry.k8s.io/etcd:3.5.16-0
#   MANIFEST                  what each image holds, its package versions, and what
#                             differs from upstream
#
# Each image is a `docker build` of scripts/conformance/images/<program>/ (its
# Dockerfile says how it mirrors upstream's) FROM scratch, or FROM another image built
# here (nautilus on agnhost, as upstream's; nonewprivs on busybox, for upstream's
# Alpine), then `docker save`; the docker images are removed again, the archive being
# the product. Where upstream's base is Alpine or
# Debian jessie, the root filesystem is Debian $SUITE's, made by mmdebstrap (Debian's own
# tool: packages installed by dpkg and apt with their maintainer scripts) from the
# package archive apt reaches. Go programs come from the Go module proxy: agnhost and nnp
# from the module build.sh made (run build.sh first), CoreDNS, sample-apiserver and etcd
# from their releases' modules; pause is compiled with gcc. The image names are checked against `e2e.test
# --list-images` when e2e.test is built. An archive that exists is kept: delete it to
# rebuild it. Intermediate files go to $CONFORMANCE_DIR/images/.build and are removed
# once every archive is built.
#
# Usage: images.sh            build what is missing (CONFORMANCE_IMAGES="pause busybox
#                             agnhost ..." builds only those programs' images)
#        images.sh --check    import every archive into a private containerd (socket,
#                             root and state under a temporary directory; the system's
#                             containerd is never touched) and run each image as the
#                             tests use it (CONFORMANCE_IMAGES: only those programs')
# Needs root, docker, mmdebstrap, gcc, go; --check needs containerd, runc, ctr, curl, ip,
# openssl.
# mmdebstrap's hooks and the commands run in containers are single-quoted on purpose:
# they expand where they run ("$1" is the root filesystem a hook works on).
# shellcheck disable=SC2016
set -euo pipefail
version=${K8S_VERSION:-v1.32.4}
dir=${CONFORMANCE_DIR:?CONFORMANCE_DIR names the directory build.sh fills}
out=$dir/images
work=$out/.build
defs=$(cd "$(dirname "$0")/images" && pwd)
go=${GO:-go}

# The Debian release the root filesystems come from, and its archive (as apt's sources).
SUITE=bookworm
MIRRORS=(
	"deb http://deb.debian.org/debian $SUITE main"
	"deb http://deb.debian.org/debian $SUITE-updates main"
	"deb http://deb.debian.org/debian-security $SUITE-security main"
)
# CoreDNS releases upstream's images add: agnhost's Dockerfile adds 1.6.2,
# jessie-dnsutils's 1.5.0. Both build from the module proxy with today's Go.
AGNHOST_COREDNS=1.6.2
JESSIE_COREDNS=1.5.0
# The Debian release whose busybox source package the busybox image's busybox is built
# from: trixie's 1.37.0 is the nearest to upstream's 1.36.1 ($SUITE's is 1.35.0).
BUSYBOX_SUITE=trixie

# Image names: the suite's, for $version (checked against `e2e.test --list-images`).
AGNHOST=registry.k8s.io/e2e-test-images/agnhost:2.53
BUSYBOX=registry.k8s.io/e2e-test-images/busybox:1.36.1-1
HTTPD=registry.k8s.io/e2e-test-images/httpd:2.4.38-4
HTTPD_NEW=registry.k8s.io/e2e-test-images/httpd:2.4.39-4
NGINX=registry.k8s.io/e2e-test-images/nginx:1.14-4
NGINX_NEW=registry.k8s.io/e2e-test-images/nginx:1.15-4
JESSIE=registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7
PAUSE=registry.k8s.io/pause:3.10
# Used by conformance tests too: kubectl's Update Demo (2 tests), and "Security Context
# when creating containers with AllowPrivilegeEscalation should not allow privilege
# escalation when false".
NAUTILUS=registry.k8s.io/e2e-test-images/nautilus:1.7
NONEWPRIVS=registry.k8s.io/e2e-test-images/nonewprivs:1.3
# "[sig-api-machinery] Aggregator Should be able to support the 1.17 Sample API Server
# using the current Aggregator": the sample API server, and the etcd it runs beside (one
# pod). Upstream builds sample-apiserver image 1.Y.Z from k8s.io/sample-apiserver v0.Y.Z
# (test/images/sample-apiserver/Makefile), an older release than the suite's on purpose.
SAMPLE_APISERVER=registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2
SAMPLE_APISERVER_MODULE=v0.29.2
ETCD=registry.k8s.io/etcd:3.5.16-0
ALL=("$AGNHOST" "$BUSYBOX" "$HTTPD" "$HTTPD_NEW" "$NGINX" "$NGINX_NEW" "$JESSIE" "$PAUSE" "$NAUTILUS" "$NONEWPRIVS" "$SAMPLE_APISERVER" "$ETCD")

# archive NAME: the archive file of image NAME (repository's last element-tag.tar).
archive() {
	local base=${1##*/}
	echo "$out/${base%%:*}-${base##*:}.tar"
}

# part NAME: image NAME's part of the MANIFEST, kept with its archive.
part() {
	local file
	file=$(archive "$1")
	echo "$out/.manifest/${file##*/}.txt"
}

# module MODULE@VERSION [FIELD]: where the Go module cache holds MODULE@VERSION's source
# (FIELD Dir, the default) or its go.mod (GoMod), downloaded from the Go module proxy if
# it is not there yet.
module() {
	GOWORK=off GOSUMDB=off GOFLAGS=-mod=mod "$go" mod download -json "$1" |
		sed -n "s/.*\"${2:-Dir}\": \"\(.*\)\",/\1/p"
}

# kube: the kubernetes module's source at $version (build.sh's module has it).
kube() {
	module "k8s.io/kubernetes@$version"
}

# kube_build PACKAGE OUT [LDFLAGS]: a static build of PACKAGE (a path under
# k8s.io/kubernetes) into OUT, in a copy of build.sh's module with build.sh's environment,
# so that the packages e2e.test compiled are reused.
kube_build() {
	local mod=$work/kube-module
	if [ ! -s "$mod/go.mod" ]; then
		[ -s "$dir/module/go.mod" ] || {
			echo "images.sh: $dir/module/go.mod missing: run scripts/conformance/build.sh first" >&2
			exit 1
		}
		mkdir -p "$mod"
		cp "$dir/module/go.mod" "$dir/module/go.sum" "$mod/"
	fi
	(cd "$mod" && CGO_ENABLED=0 GOWORK=off GOSUMDB=off GOFLAGS=-mod=mod \
		"$go" build -ldflags "-s -w ${3:-}" -o "$2" "k8s.io/kubernetes/$1")
}

# check_names: every name above is one e2e.test may use, if e2e.test is built; a
# different K8S_VERSION may name other tags, and then this script needs updating.
check_names() {
	if [ ! -x "$dir/e2e.test" ]; then
		echo "images.sh: $dir/e2e.test not built yet; image names not checked against --list-images"
		return
	fi
	local listed name missing=0
	listed=$("$dir/e2e.test" --list-images)
	for name in "${ALL[@]}"; do
		if ! grep -qxF "$name" <<<"$listed"; then
			echo "images.sh: e2e.test of $version does not use $name (update images.sh)" >&2
			missing=1
		fi
	done
	[ "$missing" = 0 ]
	echo "image names: each one e2e.test --list-images prints"
}

# rootfs PROGRAM PACKAGES [HOOK]...: $work/PROGRAM/rootfs.tar, a Debian $SUITE root
# filesystem (mmdebstrap, variant essential: the Essential: yes set, then PACKAGES and
# their dependencies), without documentation, manuals, locales or /dev (the runtime
# makes /dev), nor the build host's resolv.conf and hostname (the runtime mounts its
# own). Each HOOK is a shell command run on the finished tree, "$1". The installed
# packages' versions go to $work/PROGRAM/versions ("package version" lines). Kept if built.
rootfs() {
	local program=$1 packages=$2
	shift 2
	local tar=$work/$program/rootfs.tar hooks=() hook
	[ -s "$tar" ] && return
	mkdir -p "$work/$program"
	for hook in "$@"; do
		hooks+=(--customize-hook="$hook")
	done
	echo "  $program: Debian $SUITE root filesystem with $packages (mmdebstrap)"
	mmdebstrap --quiet --mode=root --variant=essential --format=tar --include="$packages" \
		--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		--customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"' \
		"${hooks[@]}" \
		--customize-hook="chroot \"\$1\" dpkg-query -W -f '\${Package} \${Version}\n' >'$work/$program/versions'" \
		--skip=output/dev \
		"$SUITE" "$tar.tmp" "${MIRRORS[@]}" </dev/null
	mv "$tar.tmp" "$tar"
}

# pkgver PROGRAM PACKAGE...: "package version, ..." from PROGRAM's root filesystem.
pkgver() {
	local program=$1
	shift
	local p
	for p in "$@"; do
		awk -v p="$p" '$1 == p || $1 == p":amd64" { print p, $2 }' "$work/$program/versions"
	done | paste -sd, | sed 's/,/, /g'
}

# coredns VERSION: $work/coredns-VERSION, CoreDNS VERSION (unmodified, static) from the
# Go module proxy. Its old go.mod needs a wrapper module: it carries a replace directive,
# and its graph names a pseudo-version of opencensus-proto that the proxy no longer
# serves (only its go.mod is read; the build uses v0.2.0, which MVS selects anyway).
coredns() {
	local v=$1 bin=$work/coredns-$1 mod=$work/coredns-$1-module
	[ -x "$bin" ] && return
	echo "  CoreDNS $v (Go module proxy)"
	mkdir -p "$mod"
	cat >"$mod/go.mod" <<-EOF
		module skiff.dev/conformance/coredns

		go 1.12

		require github.com/coredns/coredns v$v

		replace github.com/miekg/dns v1.1.3 => github.com/miekg/dns v1.1.15

		replace github.com/census-instrumentation/opencensus-proto v0.1.0-0.20181214143942-ba49f56771b8 => github.com/census-instrumentation/opencensus-proto v0.1.0
	EOF
	(cd "$mod" && CGO_ENABLED=0 GOWORK=off GOSUMDB=off GOFLAGS="-mod=mod -trimpath" \
		"$go" build -ldflags "-s -w" -o "$bin" github.com/coredns/coredns)
}

# image NAME PROGRAM NOTE [BASE]: docker build of $work/PROGRAM (its Dockerfile and
# context, copied from scripts/conformance/images/PROGRAM) tagged NAME, saved as NAME's
# archive; NOTE ("holds" and "differs" lines) becomes NAME's part of the MANIFEST. BASE
# names an image built here that the Dockerfile builds FROM (build-arg BASE), loaded from
# its archive for the build.
image() {
	local name=$1 program=$2 note=$3 base=${4:-} file log
	file=$(archive "$name")
	mkdir -p "$out/.manifest" "$work/$program"
	cp -r "$defs/$program/." "$work/$program/"
	[ -z "$base" ] || docker load -q -i "$(archive "$base")" >/dev/null
	if ! log=$(docker build --quiet --build-arg IMAGE="$name" --build-arg BASE="$base" -t "$name" "$work/$program" 2>&1 >/dev/null); then
		echo "$log" >&2
		exit 1
	fi
	docker save -o "$file.tmp" "$name"
	chmod 644 "$file.tmp"
	docker rmi "$name" ${base:+"$base"} >/dev/null
	printf '%s\n  archive: %s\n%s\n' "$name" "${file##*/}" "$note" >"$(part "$name")"
	mv "$file.tmp" "$file"
	echo "built $name: ${file#"$dir/"} ($(du -m "$file" | cut -f1) MB)"
}

# present NAME: whether NAME's archive exists (it is then kept).
present() {
	local file
	file=$(archive "$1")
	if [ -s "$file" ] && [ -s "$(part "$1")" ]; then
		echo "$1: ${file#"$dir/"} present, kept"
		return 0
	fi
	return 1
}

build_agnhost() {
	present "$AGNHOST" && return
	local tag=${AGNHOST##*:} src
	rootfs agnhost "bash,curl,bind9-dnsutils,bind9-host,netcat-openbsd,iproute2,iperf,ca-certificates,busybox,usr-is-merged" \
		'chroot "$1" /bin/sh -c '\''PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
			for p in $(busybox --list-full); do
				command -v "${p##*/}" >/dev/null || ln -s /bin/busybox "/$p"
			done'\''' \
		'ln -s /usr/bin/iperf "$1/usr/local/bin/iperf"' \
		'mkdir "$1/uploads" && ln -s agnhost "$1/agnhost-2"' \
		'echo "user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh" >>"$1/etc/passwd"
		 echo "user-defined-in-image:x:1000:" >>"$1/etc/group"
		 echo "group-defined-in-image:x:50000:user-defined-in-image" >>"$1/etc/group"
		 install -d -o 1000 -g 1000 "$1/home/user-defined-in-image"'
	coredns "$AGNHOST_COREDNS"
	cp "$work/coredns-$AGNHOST_COREDNS" "$work/agnhost/coredns"
	echo "  agnhost $tag from k8s.io/kubernetes@$version (build.sh's module)"
	kube_build test/images/agnhost "$work/agnhost/agnhost" "-X main.Version=$tag"
	src=$(kube)/test/images/agnhost
	cp "$src/porter/localhost.crt" "$src/porter/localhost.key" "$work/agnhost/"
	image "$AGNHOST" agnhost "  holds: /agnhost $tag built from k8s.io/kubernetes@$version test/images/agnhost ($("$go" env GOVERSION), static), /agnhost-2 -> agnhost, /uploads, /localhost.crt and /localhost.key (porter's), /coredns = CoreDNS $AGNHOST_COREDNS (built from the Go module proxy, as upstream's release binary), user-defined-in-image (1000) in group-defined-in-image (50000), ENTRYPOINT [/agnhost] CMD [pause]
  packages (Debian $SUITE): $(pkgver agnhost bash curl bind9-dnsutils bind9-host netcat-openbsd iproute2 iperf busybox)
  differs: base is Debian $SUITE (variant essential: coreutils, dash as /bin/sh, ...) instead of Alpine 3.19 (busybox, musl); the tools upstream installs with apk are Debian's packages of the same programs (bind9's dig and nslookup as Alpine's bind-tools, netcat-openbsd, iproute2, iperf 2, curl, bash), and every other command Alpine's busybox provides (wget, ps, ping, ...) is a link to Debian's busybox"
}

# busybox_static: $work/busybox-static, a static busybox built from Debian
# $BUSYBOX_SUITE's busybox source package (apt-get source through a temporary apt
# configuration of deb-src lines, so the host's sources are untouched) as debian/rules
# builds busybox-static's (debian/config/pkg/static, Debian's build flags), with Debian's
# patches except two: revert-9c143ce52da11ec3d21a3491c3749841d3dc10f0.patch, which makes
# ash drop environment variables whose names are not shell identifiers ("data-1=value-1")
# instead of passing them to children as upstream's does (tests run `sh -c env` with such
# names from envFrom), and temp-deb-installer-hack.patch, which only builds on that revert
# (an option, off in the static flavour, to keep them for debian-installer). Stripped as
# dh_strip does; checked to pass such a variable on. Kept if built.
busybox_static() {
	local bin=$work/busybox-static src=$work/busybox-src apt patch
	local skip=(revert-9c143ce52da11ec3d21a3491c3749841d3dc10f0.patch temp-deb-installer-hack.patch)
	[ -x "$bin" ] && return
	need dpkg-source dpkg-dev
	need bzip2 bzip2
	echo "  busybox: Debian $BUSYBOX_SUITE's busybox source package (static flavour, without the revert of upstream 9c143ce5)"
	rm -rf "$src"
	mkdir -p "$src/apt/lists/partial" "$src/apt/cache/archives/partial"
	printf 'deb-src %s\n' "http://deb.debian.org/debian $BUSYBOX_SUITE main" \
		"http://deb.debian.org/debian $BUSYBOX_SUITE-updates main" \
		"http://deb.debian.org/debian-security $BUSYBOX_SUITE-security main" >"$src/apt/sources.list"
	apt=(-q -o Dir::Etc::SourceList="$src/apt/sources.list" -o Dir::Etc::SourceParts=-
		-o Dir::State::Lists="$src/apt/lists" -o Dir::Cache="$src/apt/cache"
		-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o Debug::NoLocking=1
		-o APT::Sandbox::User=root)
	apt-get "${apt[@]}" update >/dev/null
	(cd "$src" && apt-get "${apt[@]}" source --download-only busybox >/dev/null)
	# apt checked the files against the archive's signed Sources; the uploader's signature
	# of the .dsc is not checked again (Debian's keyring of uploaders is not installed).
	dpkg-source --no-check --skip-patches -x "$src"/busybox_*.dsc "$src/tree" >/dev/null
	# The two patches out of the series (each must be there: a new upload may change
	# them), then dpkg-source applies the rest. debian/rules compares the configuration
	# it regenerates with debian/config/pkg/static, which names the skipped patch's option.
	for patch in "${skip[@]}"; do
		grep -qxF "$patch" "$src/tree/debian/patches/series" || {
			echo "images.sh: busybox's debian/patches/series has no $patch (update images.sh)" >&2
			exit 1
		}
	done
	grep -vxF "${skip[@]/#/-e}" "$src/tree/debian/patches/series" >"$src/series"
	mv "$src/series" "$src/tree/debian/patches/series"
	sed -i '/^# CONFIG_FEATURE_DI_ENV_HACK is not set$/d' "$src/tree/debian/config/pkg/static"
	(cd "$src/tree" && dpkg-source --before-build . >/dev/null)
	if ! (cd "$src/tree" && DEB_BUILD_OPTIONS="parallel=$(nproc) terse" debian/rules b/static/.stamp-build) >"$src/build.log" 2>&1; then
		tail -30 "$src/build.log" >&2
		exit 1
	fi
	strip --remove-section=.comment --remove-section=.note -o "$bin.tmp" "$src/tree/b/static/busybox"
	env 'data-1=value-1' "$bin.tmp" sh -c env | grep -qx 'data-1=value-1' || {
		echo "images.sh: the busybox built does not pass data-1=value-1 on to children" >&2
		exit 1
	}
	mv "$bin.tmp" "$bin"
	rm -rf "$src"
}

build_busybox() {
	present "$BUSYBOX" && return
	local root=$work/busybox/root applet banner
	busybox_static
	rm -rf "$root"
	mkdir -p "$root"/{bin,etc,home,root,tmp,usr/sbin,var/spool/mail,var/www}
	chmod 1777 "$root/tmp"
	chmod 700 "$root/root"
	install -m 0755 "$work/busybox-static" "$root/bin/busybox"
	for applet in $("$root/bin/busybox" --list); do
		[ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
	done
	# The users and groups docker-library's busybox build writes (tests name users by uid).
	printf '%s\n' root:x:0:0:root:/root:/bin/sh daemon:x:1:1:daemon:/usr/sbin:/bin/false \
		bin:x:2:2:bin:/bin:/bin/false sys:x:3:3:sys:/dev:/bin/false \
		nobody:x:65534:65534:nobody:/home:/bin/false >"$root/etc/passwd"
	printf '%s\n' root:x:0: daemon:x:1: bin:x:2: sys:x:3: adm:x:4: tty:x:5: disk:x:6: \
		wheel:x:10:root staff:x:50: users:x:100: nogroup:x:65534: >"$root/etc/group"
	tar -C "$root" --owner=0 --group=0 --numeric-owner -cf "$work/busybox/rootfs.tar" .
	# "BusyBox v1.37.0 (Debian 1:1.37.0-6)"
	banner=$("$root/bin/busybox" | head -1 | sed 's/ multi-call.*//')
	image "$BUSYBOX" busybox "  holds: $banner, built from Debian $BUSYBOX_SUITE's busybox source package as its busybox-static (debian/config/pkg/static) with Debian's patches except the revert of upstream commit 9c143ce5 (revert-9c143ce52da11ec3d21a3491c3749841d3dc10f0.patch, and temp-deb-installer-hack.patch, which builds on it), so that ash passes environment variables whose names are not shell identifiers (data-1=...) to children as upstream's does; statically linked with Debian's glibc; as /bin/busybox with a link per applet in /bin, /etc/passwd and /etc/group as docker-library's busybox build writes them (root, daemon, bin, sys, nobody 65534), CMD [sh]
  differs: BusyBox $(cut -d' ' -f2 <<<"$banner" | tr -d v) with Debian's patches (but that revert) instead of 1.36.1; the same applets tests use (sh, echo, cat, ls, id, sleep, wget, nslookup, ...)"
}

# httpd_rootfs: apache2-bin laid out as the official image's /usr/local/apache2. Debian's
# binary reads /etc/apache2/apache2.conf where upstream's reads conf/httpd.conf under
# its prefix: the former links to the latter, whose ServerRoot is the prefix.
httpd_rootfs() {
	rootfs httpd "apache2-bin,media-types" \
		'p="$1/usr/local/apache2"
		 mkdir -p "$p/bin" "$p/conf" "$p/htdocs" "$p/logs" "$p/cgi-bin" "$1/etc/apache2"
		 ln -s /usr/sbin/apache2 "$p/bin/httpd"
		 ln -s /usr/lib/apache2/modules "$p/modules"
		 ln -s /etc/mime.types "$p/conf/mime.types"
		 ln -s /usr/local/apache2/conf/httpd.conf "$1/etc/apache2/apache2.conf"
		 chroot "$1" chown www-data:www-data /usr/local/apache2'
}

build_httpd() {
	local name=$1 upstream=$2
	present "$name" && return
	httpd_rootfs
	image "$name" httpd "  holds: Debian's Apache httpd ($(pkgver httpd apache2-bin)) as /usr/local/apache2/bin/httpd, the official image's layout under /usr/local/apache2 and its httpd.conf (port 80, logs to stdout/stderr), htdocs/index.html = httpd's default page (\"It works!\"), /usr/local/bin/httpd-foreground, CMD [httpd-foreground], WORKDIR /usr/local/apache2
  differs: upstream is $upstream; this is httpd $(pkgver httpd apache2-bin | cut -d' ' -f2 | cut -d- -f1) from Debian $SUITE on a Debian root filesystem (modules built into Debian's binary are not loaded again). $HTTPD and $HTTPD_NEW hold the same program and differ in their label dev.skiff.image, so their digests differ as the tests rolling from one to the other need"
}

nginx_rootfs() {
	rootfs nginx "nginx" \
		'ln -sf /dev/stdout "$1/var/log/nginx/access.log" && ln -sf /dev/stderr "$1/var/log/nginx/error.log"'
}

build_nginx() {
	local name=$1 upstream=$2
	present "$name" && return
	nginx_rootfs
	image "$name" nginx "  holds: Debian's nginx ($(pkgver nginx nginx)), the official image's nginx.conf and conf.d/default.conf (port 80, root /usr/share/nginx/html: nginx's default page \"Welcome to nginx!\"), logs to stdout/stderr, CMD [nginx -g daemon off;], STOPSIGNAL SIGTERM
  differs: upstream is $upstream; this is nginx $(pkgver nginx nginx | cut -d' ' -f2 | cut -d- -f1) from Debian $SUITE on a Debian root filesystem; workers run as www-data (upstream: a user nginx); no 50x.html error page (Debian does not ship it). $NGINX and $NGINX_NEW hold the same program and differ in their label dev.skiff.image, so their digests differ"
}

build_jessie() {
	present "$JESSIE" && return
	rootfs jessie-dnsutils "dnsutils,bind9-host,usr-is-merged"
	coredns "$JESSIE_COREDNS"
	cp "$work/coredns-$JESSIE_COREDNS" "$work/jessie-dnsutils/coredns"
	image "$JESSIE" jessie-dnsutils "  holds: Debian $SUITE (variant essential) with dnsutils: $(pkgver jessie-dnsutils bind9-dnsutils bind9-host), /coredns = CoreDNS $JESSIE_COREDNS (built from the Go module proxy), CMD [bash]
  differs: Debian $SUITE instead of jessie (8), so bind9 9.18's dig and nslookup instead of 9.9's; no apt in the image"
}

build_nautilus() {
	present "$NAUTILUS" && return
	local src
	src=$(kube)/test/images/nautilus/html
	mkdir -p "$work/nautilus"
	cp "$src/nautilus.jpg" "$src/data.json" "$work/nautilus/"
	image "$NAUTILUS" nautilus "  holds: $AGNHOST (above) with test/images/nautilus/html's nautilus.jpg and data.json of k8s.io/kubernetes@$version at /, CMD [test-webserver] (agnhost serving / on port 80)
  differs: built FROM this agnhost 2.53 instead of agnhost 2.33; test-webserver is the same program" "$AGNHOST"
}

build_nonewprivs() {
	present "$NONEWPRIVS" && return
	mkdir -p "$work/nonewprivs"
	echo "  nonewprivs: test/images/nonewprivs of k8s.io/kubernetes@$version (build.sh's module)"
	mkdir -p "$work/nonewprivs/root/usr/local/bin"
	kube_build test/images/nonewprivs "$work/nonewprivs/root/usr/local/bin/nnp"
	# upstream's `chmod +s`; docker's COPY drops those bits, ADD of a tar keeps them.
	chmod 6755 "$work/nonewprivs/root/usr/local/bin/nnp"
	tar -C "$work/nonewprivs/root" --owner=0 --group=0 --numeric-owner -cf "$work/nonewprivs/nnp.tar" usr/local/bin/nnp
	image "$NONEWPRIVS" nonewprivs "  holds: $BUSYBOX (above) with /usr/local/bin/nnp built from test/images/nonewprivs of k8s.io/kubernetes@$version ($("$go" env GOVERSION), static), setuid and setgid root; CMD [nnp] (prints its effective uid)
  differs: base is this busybox image instead of Alpine 3.6 (busybox, musl, apk)" "$BUSYBOX"
}

build_pause() {
	present "$PAUSE" && return
	local tag=${PAUSE##*:}
	mkdir -p "$work/pause"
	echo "  pause $tag: build/pause/linux/pause.c of k8s.io/kubernetes@$version (gcc, static)"
	gcc -Os -Wall -Werror -static -DVERSION="v$tag" -o "$work/pause/pause" "$(kube)/build/pause/linux/pause.c"
	strip "$work/pause/pause"
	image "$PAUSE" pause "  holds: /pause compiled from build/pause/linux/pause.c of k8s.io/kubernetes@$version with $(gcc --version | head -1) (-Os -static, stripped, as upstream's Makefile does), USER 65535:65535, ENTRYPOINT [/pause]
  differs: compiled with Debian's gcc and glibc instead of kube-cross's toolchain; -DVERSION=v$tag without upstream's git revision suffix"
}

# static_root ROOT: what a static program's root filesystem holds besides the program, as
# upstream's bases (distroless/static, Alpine) hold it: /tmp (1777), /root (700), and
# /etc/passwd and /etc/group naming root and nobody (65534).
static_root() {
	mkdir -p "$1/etc" "$1/tmp" "$1/root"
	chmod 1777 "$1/tmp"
	chmod 700 "$1/root"
	printf '%s\n' root:x:0:0:root:/root:/sbin/nologin nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin >"$1/etc/passwd"
	printf '%s\n' root:x:0: nobody:x:65534: >"$1/etc/group"
}

# The sample API server: k8s.io/sample-apiserver $SAMPLE_APISERVER_MODULE (unmodified,
# static) from the Go module proxy, built as upstream's Makefile builds it: in its own
# module (a copy of the module's source, its go.mod and go.sum), `go build .`.
build_sample_apiserver() {
	present "$SAMPLE_APISERVER" && return
	local src=$work/sample-apiserver-src root=$work/sample-apiserver/root
	echo "  sample-apiserver: k8s.io/sample-apiserver@$SAMPLE_APISERVER_MODULE (Go module proxy)"
	rm -rf "$src" "$root"
	mkdir -p "$root"
	cp -r "$(module "k8s.io/sample-apiserver@$SAMPLE_APISERVER_MODULE")" "$src"
	chmod -R u+w "$src"
	(cd "$src" && CGO_ENABLED=0 GOWORK=off GOSUMDB=off GOFLAGS="-mod=mod -trimpath" \
		"$go" build -ldflags "-s -w" -o "$root/sample-apiserver" .)
	rm -rf "$src"
	static_root "$root"
	tar -C "$root" --owner=0 --group=0 --numeric-owner -cf "$work/sample-apiserver/root.tar" .
	image "$SAMPLE_APISERVER" sample-apiserver "  holds: /sample-apiserver built from k8s.io/sample-apiserver $SAMPLE_APISERVER_MODULE (Go module proxy; its own go.mod and go.sum, so k8s.io/apiserver $SAMPLE_APISERVER_MODULE and the rest at the versions it names) with $("$go" env GOVERSION) (static, stripped), /tmp, /etc/passwd and /etc/group (root, nobody), ENTRYPOINT [/sample-apiserver]
  differs: upstream is Alpine 3.8 (busybox, musl) with the same program built by kube-cross's Go; there is no shell or other command here (the test runs only the entrypoint, with its flags)"
}

# etcd_bins VERSION: $work/etcd-VERSION/etcd and etcdctl, etcd VERSION's server and
# etcdctl (unmodified, static) from the Go module proxy, built as etcd's build.sh builds
# them (CGO_ENABLED=0, -trimpath; stripped here). Their go.mod files replace etcd's other
# modules with directories of etcd's repository, which a module from the proxy cannot
# use, so they are built in a wrapper module that requires both, with server's go
# directive (hence the same GODEBUG defaults); every requirement of both go.mod files
# is checked to be the version the wrapper selects, so the dependencies are those of
# etcd's own build. Kept if built.
etcd_bins() {
	local v=$1 bin=$work/etcd-$1 mod=$work/etcd-$1-module gomod req selected m
	[ -x "$bin/etcd" ] && [ -x "$bin/etcdctl" ] && return
	echo "  etcd $v: go.etcd.io/etcd/server/v3 and etcdctl/v3 (Go module proxy)"
	mkdir -p "$mod" "$bin"
	gomod=$(module "go.etcd.io/etcd/server/v3@v$v" GoMod)
	cat >"$mod/go.mod" <<-EOF
		module skiff.dev/conformance/etcd

		go $(sed -n 's/^go //p' "$gomod")

		require (
			go.etcd.io/etcd/server/v3 v$v
			go.etcd.io/etcd/etcdctl/v3 v$v
		)
	EOF
	selected=$(cd "$mod" && GOWORK=off GOSUMDB=off GOFLAGS=-mod=mod "$go" list -m -f '{{.Path}} {{.Version}}' all)
	for m in server etcdctl; do
		gomod=$(module "go.etcd.io/etcd/$m/v3@v$v" GoMod)
		# "path version" of each require line, in blocks or not.
		while read -r req; do
			grep -qxF "$req" <<<"$selected" || {
				echo "images.sh: etcd $v's $m/go.mod requires $req; the wrapper module selects $(grep "^${req% *} " <<<"$selected")" >&2
				exit 1
			}
		done < <(awk '/^require \($/ { r = 1; next } r && /^\)/ { r = 0 } r && NF >= 2 && $1 !~ /^\/\// { print $1, $2 } /^require [^(]/ { print $2, $3 }' "$gomod")
	done
	(cd "$mod" && CGO_ENABLED=0 GOWORK=off GOSUMDB=off GOFLAGS="-mod=mod -trimpath" \
		"$go" build -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3 &&
		CGO_ENABLED=0 GOWORK=off GOSUMDB=off GOFLAGS="-mod=mod -trimpath" \
			"$go" build -ldflags "-s -w" -o "$bin/etcdctl" go.etcd.io/etcd/etcdctl/v3)
}

build_etcd() {
	present "$ETCD" && return
	local tag=${ETCD##*:} v root=$work/etcd/root
	v=${tag%-*}
	etcd_bins "$v"
	rm -rf "$root"
	mkdir -p "$root/usr/local/bin"
	static_root "$root"
	cp "$work/etcd-$v/etcd" "$work/etcd-$v/etcdctl" "$root/usr/local/bin/"
	ln -s etcd "$root/usr/local/bin/etcd-$v"
	ln -s etcdctl "$root/usr/local/bin/etcdctl-$v"
	tar -C "$root" --owner=0 --group=0 --numeric-owner -cf "$work/etcd/root.tar" .
	image "$ETCD" etcd "  holds: /usr/local/bin/etcd and etcdctl of etcd $v (go.etcd.io/etcd/server/v3 and etcdctl/v3 v$v from the Go module proxy, with the dependency versions of their go.mod files, $("$go" env GOVERSION), static, stripped), etcd-$v -> etcd and etcdctl-$v -> etcdctl, /tmp, /etc/passwd and /etc/group (root, nobody), WORKDIR /, no entrypoint (the test runs /usr/local/bin/etcd --listen-client-urls ... --advertise-client-urls ...)
  differs: upstream is gcr.io/distroless/static with etcd's v$v release binaries (built with Go 1.22) and also etcd and etcdctl 3.4.18 (etcd-3.4.18, etcdctl-3.4.18), cluster/images/etcd's migrate and migrate-if-needed.sh, and bash-static as /bin/sh, for upgrading a cluster's etcd in place; none of them is here, nor distroless's CA certificates and time zones. etcd --version says \"Git SHA: Not provided\" (upstream's release names its commit)"
}

# manifest: $out/MANIFEST from every built image's part, then what was not built.
manifest() {
	{
		echo "# Kubernetes $version conformance test images, built offline by scripts/conformance/images.sh."
		echo "# Load each archive with: ctr -n k8s.io images import FILE"
		echo
		local name
		for name in "${ALL[@]}"; do
			[ -s "$(part "$name")" ] || continue
			cat "$(part "$name")"
			echo
		done
	} >"$out/MANIFEST"
}

# need COMMAND PACKAGE: installs Debian's PACKAGE when COMMAND is missing (apt's package
# lists first if a fresh machine has none).
need() {
	command -v "$1" >/dev/null && return
	apt-get install -y -q "$2" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -q "$2" >/dev/null; }
}

# want PROGRAM: whether PROGRAM's images are to be built (or checked): every one, or
# those $CONFORMANCE_IMAGES names (e.g. "pause busybox agnhost", for a slice of the
# suite that runs no other; CI's). nautilus is built on agnhost, nonewprivs on busybox.
want() {
	[ -z "${CONFORMANCE_IMAGES:-}" ] || [[ " $CONFORMANCE_IMAGES " == *" $1 "* ]]
}

# program NAME: the program whose image NAME is (its repository's last element).
program() {
	local base=${1##*/}
	echo "${base%%:*}"
}

build() {
	[ "$(id -u)" = 0 ] || { echo "images.sh: run as root (mmdebstrap --mode=root)" >&2; exit 1; }
	need mmdebstrap mmdebstrap
	need gcc build-essential
	check_names
	mkdir -p "$work"
	echo "building the conformance test images of Kubernetes $version in $out"
	want pause && build_pause
	want busybox && build_busybox
	want agnhost && build_agnhost
	want httpd && build_httpd "$HTTPD" "httpd:2.4.38-alpine"
	want httpd && build_httpd "$HTTPD_NEW" "httpd:2.4.39-alpine"
	want nginx && build_nginx "$NGINX" "nginx:1.14-alpine"
	want nginx && build_nginx "$NGINX_NEW" "nginx:1.15-alpine"
	want jessie-dnsutils && build_jessie
	want nautilus && build_nautilus
	want nonewprivs && build_nonewprivs
	want sample-apiserver && build_sample_apiserver
	want etcd && build_etcd
	manifest
	rm -rf "$work"
	echo "images in $out ($(du -cm "$out"/*.tar | tail -1 | cut -f1) MB); what they hold: $out/MANIFEST"
}

# check: every archive (of the programs want selects) imported into a private
# containerd (Debian's 1.6, CRI off, its socket, root and state under a temporary
# directory), then each image run with ctr as the tests use it; servers run in network
# namespaces of their own (loopback only) and are reached with curl through `ip netns
# exec`.
check() {
	local tmp name file start imported=0
	want sample-apiserver && need openssl openssl
	tmp=$(mktemp -d /tmp/skiff-images-check.XXXXXX)
	chk_tmp=$tmp
	chk_sock=$tmp/containerd.sock
	chk_containers=()
	chk_netns=()
	trap check_cleanup EXIT
	cat >"$tmp/config.toml" <<-EOF
		version = 2
		root = "$tmp/root"
		state = "$tmp/state"
		disabled_plugins = ["io.containerd.grpc.v1.cri"]
		[grpc]
		  address = "$chk_sock"
		[ttrpc]
		  address = "$chk_sock.ttrpc"
		[debug]
		  address = ""
		[metrics]
		  address = ""
		[plugins."io.containerd.internal.v1.opt"]
		  path = "$tmp/opt"
	EOF
	containerd --config "$tmp/config.toml" >"$tmp/containerd.log" 2>&1 &
	chk_containerd=$!
	for _ in $(seq 50); do
		ctr -a "$chk_sock" version >/dev/null 2>&1 && break
		sleep 0.2
	done
	echo "checking the images in $out with $(containerd --version | cut -d' ' -f1,3) (private, $chk_sock)"

	start=$SECONDS
	for name in "${ALL[@]}"; do
		want "$(program "$name")" || continue
		file=$(archive "$name")
		[ -s "$file" ] || fail "$file missing: run images.sh first"
		c images import "$file" >/dev/null || fail "ctr images import $file"
		c images check "name==$name" | grep -q complete || fail "$name not complete after importing $file"
		imported=$((imported + 1))
	done
	ok "imported $imported archives ($((SECONDS - start)) s)"

	for name in "$AGNHOST" "$BUSYBOX" "$HTTPD" "$NGINX" "$JESSIE"; do
		want "$(program "$name")" || continue
		expect "sh -c 'echo ok' in $name" ok once "$name" sh -c 'echo ok'
	done
	want agnhost && check_agnhost
	want httpd && check_httpd
	want nautilus && check_nautilus
	want nonewprivs && check_nonewprivs
	want nginx && check_nginx
	want sample-apiserver && want etcd && check_sample_apiserver
	want pause && check_pause
	echo "all images work"
}

check_agnhost() {
	expect "agnhost's tools" ok once "$AGNHOST" sh -c \
		'for t in bash curl dig nslookup nc ip ss iperf wget ps ping /coredns; do command -v $t >/dev/null || { echo "no $t"; exit 1; }; done; echo ok'
	expect "agnhost's users" "uid=1000(user-defined-in-image) gid=1000(user-defined-in-image) groups=1000(user-defined-in-image),50000(group-defined-in-image)" \
		once "$AGNHOST" id user-defined-in-image
	expect "/agnhost-2" "$(printf 'agnhost\nruns')" once "$AGNHOST" sh -c 'readlink /agnhost-2 && /agnhost-2 --help >/dev/null && echo runs'
	serve agnhost-pause "$AGNHOST" ""
	running agnhost-pause

	local ns
	netns
	ns=$chk_ns
	serve netexec "$AGNHOST" "$ns" /agnhost netexec --http-port=8080 --udp-port=8081
	expect "agnhost netexec /echo" ok fetch "$ns" "http://127.0.0.1:8080/echo?msg=ok"
	expect "agnhost netexec /shell (sh -c)" '{"output":"ok\n"}' fetch "$ns" "http://127.0.0.1:8080/shell?cmd=echo%20ok"

	netns
	ns=$chk_ns
	printf '. {\n  hosts {\n    192.0.2.7 probe.example.test\n  }\n}\n' >"$chk_tmp/Corefile"
	serve coredns "$AGNHOST" "$ns" --mount "type=bind,src=$chk_tmp/Corefile,dst=/etc/coredns/Corefile,options=rbind:ro" \
		/coredns -conf /etc/coredns/Corefile
	# The DNS tests' probes, in agnhost (and jessie-dnsutils, if checked) against /coredns.
	want jessie-dnsutils || {
		check_dns_probes "$ns" "$AGNHOST"
		return
	}
	expect "dig in $JESSIE (against agnhost's /coredns)" 192.0.2.7 \
		once --with-ns "network:/var/run/netns/$ns" "$JESSIE" dig +short +tries=10 +time=1 @127.0.0.1 probe.example.test A
	check_dns_probes "$ns" "$JESSIE" "$AGNHOST"
	expect "nslookup in $JESSIE" "Address: 192.0.2.7" \
		once --with-ns "network:/var/run/netns/$ns" "$JESSIE" sh -c 'nslookup probe.example.test 127.0.0.1 | grep "^Address: 192"'
}

# check_dns_probes NETNS IMAGE...: the DNS tests' probes in each IMAGE, against the
# CoreDNS serving in NETNS: dig over UDP and TCP, getent (hosts in the tests, where the
# pod has its /etc/hosts), seq.
check_dns_probes() {
	local ns=$1 name
	shift
	for name in "$@"; do
		expect "the DNS tests' probe commands in $name" "$(printf '192.0.2.7\n192.0.2.7\nOK')" \
			once --with-ns "network:/var/run/netns/$ns" "$name" sh -c \
			'for p in +notcp +tcp; do dig $p +noall +answer +search @127.0.0.1 probe.example.test A | awk "{ print \$NF }"; done
			 for i in `seq 1 2`; do :; done; test -n "$(getent passwd root)" && echo OK'
	done
}

check_httpd() {
	local name ns
	for name in "$HTTPD" "$HTTPD_NEW"; do
		netns
		ns=$chk_ns
		serve "httpd-${name##*:}" "$name" "$ns"
		expect "$name on port 80" "<html><body><h1>It works!</h1></body></html>" fetch "$ns" http://127.0.0.1/
	done
	# StatefulSet tests break and restore the readiness probe by moving index.html.
	c task exec --exec-id break "httpd-${HTTPD_NEW##*:}" sh -c 'mv -v /usr/local/apache2/htdocs/index.html /tmp/' >/dev/null
	expect "$HTTPD_NEW without index.html" 404 fetch_status "$ns" http://127.0.0.1/index.html
	distinct "$HTTPD" "$HTTPD_NEW"
}

check_nautilus() {
	local ns
	netns
	ns=$chk_ns
	serve nautilus "$NAUTILUS" "$ns"
	expect "$NAUTILUS serves data.json on port 80" "$(cat "$(kube)/test/images/nautilus/html/data.json")" fetch "$ns" http://127.0.0.1/data.json
}

check_nonewprivs() {
	expect "$NONEWPRIVS as root" "Effective uid: 0" once "$NONEWPRIVS"
	expect "$NONEWPRIVS as nobody, no_new_privs set" "Effective uid: 65534" once "$NONEWPRIVS" su -s /bin/sh nobody -c nnp
	expect "$NONEWPRIVS as nobody, no_new_privs unset (setuid)" "Effective uid: 0" once --allow-new-privs "$NONEWPRIVS" su -s /bin/sh nobody -c nnp
}

check_nginx() {
	local name ns
	for name in "$NGINX" "$NGINX_NEW"; do
		netns
		ns=$chk_ns
		serve "nginx-${name##*:}" "$name" "$ns"
		expect "$name on port 80" "<title>Welcome to nginx!</title>" fetch "$ns" http://127.0.0.1/ '<title>'
	done
	distinct "$NGINX" "$NGINX_NEW"
}

# check_sample_apiserver: the Aggregator test's pod without a cluster: etcd with the
# test's command, a key written and read with etcdctl beside it, and sample-apiserver
# with the test's arguments in the same network namespace, its serving certificate
# mounted where the test mounts its Secret. Without a cluster to delegate authentication
# to it stops there, having loaded the certificate and not been refused by etcd (without
# etcd, its dials are refused before it stops). Each container gets the /etc/hosts a
# kubelet mounts (etcd's default peer URL names localhost; the images have no hosts file).
check_sample_apiserver() {
	local ns certs=$chk_tmp/certificates hosts=$chk_tmp/hosts url=http://127.0.0.1:2379 got
	printf '# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$hosts"
	hosts="type=bind,src=$hosts,dst=/etc/hosts,options=rbind:ro"
	netns
	ns=$chk_ns
	serve etcd "$ETCD" "$ns" --mount "$hosts" /usr/local/bin/etcd --listen-client-urls "$url" --advertise-client-urls "$url"
	expect "$ETCD with the Aggregator test's command" '{"health":"true","reason":""}' fetch "$ns" "$url/health"
	expect "etcdctl put in $ETCD" OK once --with-ns "network:/var/run/netns/$ns" "$ETCD" etcdctl --endpoints="$url" put skiff-check ok
	expect "etcdctl get in $ETCD" ok once --with-ns "network:/var/run/netns/$ns" "$ETCD" etcdctl --endpoints="$url" get --print-value-only skiff-check
	mkdir "$certs"
	openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=sample-api \
		-keyout "$certs/tls.key" -out "$certs/tls.crt" 2>/dev/null
	# ctr's exit status is the program's (1, as it stops): the output tells what it did.
	got=$(once --with-ns "network:/var/run/netns/$ns" --mount "$hosts" \
		--mount "type=bind,src=$certs,dst=/apiserver.local.config/certificates,options=rbind:ro" \
		"$SAMPLE_APISERVER" /sample-apiserver --etcd-servers="$url" \
		--tls-cert-file=/apiserver.local.config/certificates/tls.crt \
		--tls-private-key-file=/apiserver.local.config/certificates/tls.key \
		--audit-log-path=- --audit-log-maxage=0 --audit-log-maxbackup=0 -v=2) || true
	if grep -q 'connection refused' <<<"$got" ||
		! grep -q 'Loaded a new cert/key pair.*/apiserver.local.config/certificates/tls.crt' <<<"$got" ||
		! grep -q 'unable to load in-cluster configuration' <<<"$got"; then
		fail "$SAMPLE_APISERVER with the Aggregator test's arguments: $got"
	fi
	ok "$SAMPLE_APISERVER with the Aggregator test's arguments loads the mounted certificate, is not refused by etcd, and stops at delegated authentication (no cluster)"
}

check_pause() {
	local pid
	serve pause "$PAUSE" ""
	running pause
	pid=$(c task ls | awk '$1 == "pause" { print $2 }')
	grep -q '^Uid:[[:space:]]*65535' "/proc/$pid/status" || fail "pause does not run as 65535"
	c task kill -s SIGTERM pause
	for _ in $(seq 25); do
		c task ls | grep -q '^pause .*STOPPED' && break
		sleep 0.2
	done
	c task ls | grep -q '^pause .*STOPPED' || fail "pause did not stop on SIGTERM"
	ok "pause runs as 65535 and stops on SIGTERM"
}

# c ARGS...: ctr against the check's containerd, in CRI's namespace.
c() {
	ctr -a "$chk_sock" -n k8s.io "$@"
}

ok() { echo "  ok: $*"; }

fail() {
	echo "images.sh --check: $*" >&2
	exit 1
}

# once [CTR RUN FLAGS...] IMAGE ARGS...: runs ARGS in a new container of IMAGE, waiting.
once() {
	local flags=()
	while [ "${1#-}" != "$1" ]; do
		case $1 in
		--allow-new-privs) flags+=("$1") && shift ;;
		*) flags+=("$1" "$2") && shift 2 ;;
		esac
	done
	c run --rm "${flags[@]}" "$1" "check-$BASHPID" "${@:2}" </dev/null 2>&1
}

# serve ID IMAGE NETNS [--mount SPEC] [ARGS...]: starts container ID of IMAGE in the
# background, in network namespace NETNS ("" for a new one), with ARGS or the image's
# entrypoint and command.
serve() {
	local id=$1 image=$2 ns=$3 flags=()
	shift 3
	[ -z "$ns" ] || flags+=(--with-ns "network:/var/run/netns/$ns")
	if [ "${1:-}" = --mount ]; then
		flags+=(--mount "$2")
		shift 2
	fi
	chk_containers+=("$id")
	c run -d "${flags[@]}" "$image" "$id" "$@" </dev/null >/dev/null
}

# running ID: whether container ID's task still runs a second after its start.
running() {
	sleep 1
	c task ls | grep -q "^$1 .*RUNNING" || fail "$1 is not running: $(c task ls | grep "^$1 ")"
	ok "$1 runs"
}

# netns: a new network namespace with loopback up, named in chk_ns.
netns() {
	chk_ns=skiff-images-$$-${#chk_netns[@]}
	ip netns add "$chk_ns"
	ip -n "$chk_ns" link set lo up
	chk_netns+=("$chk_ns")
}

# fetch NETNS URL [PATTERN]: the body at URL from inside NETNS (retrying while the server
# starts), or its lines matching PATTERN.
fetch() {
	local body
	if ! body=$(ip netns exec "$1" curl -fs --retry 30 --retry-connrefused --retry-delay 1 "$2"); then
		ip netns exec "$1" curl -fsS "$2" || true
		return 1
	fi
	if [ -n "${3:-}" ]; then grep -o "$3.*" <<<"$body"; else echo "$body"; fi
}

fetch_status() {
	ip netns exec "$1" curl -sS -o /dev/null -w '%{http_code}' "$2"
}

# expect WHAT WANT COMMAND...: COMMAND's output is WANT (trailing whitespace aside).
expect() {
	local what=$1 want=$2 got
	shift 2
	got=$("$@") || fail "$what: failed: $got"
	# shellcheck disable=SC2001 # trailing whitespace of every line
	[ "$(sed 's/[[:space:]]*$//' <<<"$got")" = "$want" ] || fail "$what: got $(printf '%q' "$got"), want $(printf '%q' "$want")"
	ok "$what"
}

# distinct A B: images A and B have different digests.
distinct() {
	local a b
	a=$(c images ls | awk -v n="$1" '$1 == n { print $3 }')
	b=$(c images ls | awk -v n="$2" '$1 == n { print $3 }')
	if [ -z "$a" ] || [ "$a" = "$b" ]; then
		fail "$1 and $2 have the same digest $a"
	fi
	ok "$1 and $2 differ (${a:7:12}, ${b:7:12})"
}

# check_cleanup: stops what check started: tasks, containers, containerd, namespaces.
check_cleanup() {
	local id ns
	for id in "${chk_containers[@]}"; do
		c task kill -s SIGKILL "$id" >/dev/null 2>&1 || true
	done
	for id in "${chk_containers[@]}"; do
		for _ in $(seq 25); do
			c task delete "$id" >/dev/null 2>&1 && break
			c task ls -q 2>/dev/null | grep -qx "$id" || break
			sleep 0.2
		done
		c container delete "$id" >/dev/null 2>&1 || true
	done
	if [ -n "${chk_containerd:-}" ]; then
		kill "$chk_containerd" 2>/dev/null || true
		wait "$chk_containerd" 2>/dev/null || true
	fi
	for ns in "${chk_netns[@]}"; do
		ip netns delete "$ns" 2>/dev/null || true
	done
	grep -o " $chk_tmp/[^ ]*" /proc/self/mounts | sort -r | xargs -r -n1 umount 2>/dev/null || true
	rm -rf "$chk_tmp"
}

case ${1:-} in
"") build ;;
--check) check ;;
*)
	echo "usage: images.sh [--check]" >&2
	exit 2
	;;
esac
