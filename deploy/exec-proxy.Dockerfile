# skiff/exec-proxy: exec-proxy: forwards kubectl exec, attach, port-forward and logs to kubelets, on 10443.
# A static binary built on the host by `make images` (scripts/images.sh) and the
# healthcheck's probe (deploy/probe); FROM scratch, so nothing is pulled.
FROM scratch
LABEL dev.skiff.image=images.sh
COPY .build/bin/probe /usr/local/bin/probe
COPY .build/bin/exec-proxy /usr/local/bin/exec-proxy
ENTRYPOINT ["/usr/local/bin/exec-proxy"]
