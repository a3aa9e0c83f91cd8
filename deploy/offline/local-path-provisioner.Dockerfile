# rancher/local-path-provisioner built offline: the provisioner (unmodified, from the Go
# module proxy) as a static binary at the official image's path, found on PATH by the
# manifest's `command: [local-path-provisioner, ...]`, FROM scratch. The official image
# is Alpine with the same binary; the provisioner runs no shell itself (its helper pods
# run busybox).
FROM scratch
COPY local-path-provisioner /usr/bin/local-path-provisioner
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CMD ["local-path-provisioner"]
