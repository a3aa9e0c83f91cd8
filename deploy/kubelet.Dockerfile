# skiff/kubelet: one node. kubelet-entrypoint.sh starts a built-in CRI runtime
# (SKIFF_RUNTIME: process, the default, or sim) on a unix socket, then runs the kubelet
# against it. With the process runtime each container's command runs as a process in
# this container, so busybox provides the shell and tools pods call (sh, echo, sleep...).
# The proxy (skiff's kube-proxy) runs beside the kubelet and drives nft, staged from the
# host with its libraries by scripts/nft.sh (an empty tree where the host has no nft).
# Static binaries built on the host by `make images` (scripts/images.sh); FROM scratch.
FROM scratch
LABEL dev.skiff.image=images.sh
COPY .build/bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY .build/nft-root/ /
COPY .build/bin/kubelet .build/bin/runtime .build/bin/proxy .build/bin/probe /usr/local/bin/
COPY kubelet-entrypoint.sh /usr/local/bin/kubelet-entrypoint.sh
ENV PATH=/usr/local/bin:/bin:/usr/sbin
EXPOSE 10250
ENTRYPOINT ["/usr/local/bin/kubelet-entrypoint.sh"]
