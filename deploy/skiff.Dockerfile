# skiff/skiff: the skiff binary, for `skiff pki init` (compose.yaml's one-shot pki
# service), with a static busybox whose shell copies the admin kubeconfig out for the
# host. Built on the host by `make images` (scripts/images.sh); FROM scratch.
FROM scratch
LABEL dev.skiff.image=images.sh
COPY .build/bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
COPY .build/bin/skiff /usr/local/bin/skiff
ENV PATH=/usr/local/bin:/bin
ENTRYPOINT ["/usr/local/bin/skiff"]
