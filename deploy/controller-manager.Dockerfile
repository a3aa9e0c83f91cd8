# skiff/controller-manager: kube-controller-manager's controllers (node lifecycle, taint
# eviction, node IPAM, pod GC, workloads); health and metrics on 10257.
# A static binary built on the host by `make images` (scripts/images.sh) and the
# healthcheck's probe (deploy/probe); FROM scratch, so nothing is pulled.
FROM scratch
LABEL dev.skiff.image=images.sh
COPY .build/bin/probe /usr/local/bin/probe
COPY .build/bin/controller-manager /usr/local/bin/controller-manager
ENTRYPOINT ["/usr/local/bin/controller-manager"]
