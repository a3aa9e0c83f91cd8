# nats (Docker Hub's official image) built offline: nats-server at /nats-server with the
# official image's entrypoint and default configuration file, FROM scratch.
FROM scratch
COPY nats-server nats-server.conf /
EXPOSE 4222 6222 8222
ENTRYPOINT ["/nats-server"]
CMD ["--config", "nats-server.conf"]
