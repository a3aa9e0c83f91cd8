# skiff/apiserver: the apiserver: Kubernetes REST and watch over etcd, HTTPS on 6443.
# A static binary built on the host by `make images` (deploy/images.sh) and a static
# busybox for the healthcheck (/bin/busybox wget); FROM scratch, so nothing is pulled.
FROM scratch
COPY .build/bin/busybox /bin/busybox
COPY .build/bin/apiserver /usr/local/bin/apiserver
ENTRYPOINT ["/usr/local/bin/apiserver"]
