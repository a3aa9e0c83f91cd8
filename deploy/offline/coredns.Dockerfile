# coredns/coredns built offline: CoreDNS (unmodified, from the Go module proxy) as a
# static binary at the official image's path and entrypoint, FROM scratch. The official
# image runs as nonroot with cap_net_bind_service on the binary; a scratch image cannot
# carry the file capability, so this one runs as root to bind 53.
FROM scratch
COPY coredns /coredns
EXPOSE 53 53/udp
ENTRYPOINT ["/coredns"]
