# skiff/scheduler: the scheduler: binds pending pods to nodes; health and metrics on 10259.
# A static binary built on the host by `make images` (deploy/images.sh) and a static
# busybox for the healthcheck (/bin/busybox wget); FROM scratch, so nothing is pulled.
FROM scratch
COPY .build/bin/busybox /bin/busybox
COPY .build/bin/scheduler /usr/local/bin/scheduler
ENTRYPOINT ["/usr/local/bin/scheduler"]
