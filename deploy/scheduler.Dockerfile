# skiff/scheduler: the scheduler: binds pending pods to nodes; health and metrics on 10259.
# A static binary built on the host by `make images` (scripts/images.sh) and the
# healthcheck's probe (deploy/probe); FROM scratch, so nothing is pulled.
FROM scratch
LABEL dev.skiff.image=images.sh
COPY .build/bin/probe /usr/local/bin/probe
COPY .build/bin/scheduler /usr/local/bin/scheduler
ENTRYPOINT ["/usr/local/bin/scheduler"]
