# skiff/apiserver: the apiserver: Kubernetes REST and watch over etcd, HTTPS on 6443.
# A static binary built on the host by `make images` (scripts/images.sh) and the
# healthcheck's probe (deploy/probe); FROM scratch, so nothing is pulled.
FROM scratch
LABEL dev.skiff.image=images.sh
COPY .build/bin/probe /usr/local/bin/probe
COPY .build/bin/apiserver /usr/local/bin/apiserver
ENTRYPOINT ["/usr/local/bin/apiserver"]
