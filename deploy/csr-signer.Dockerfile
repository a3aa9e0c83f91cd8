# skiff/csr-signer: the csr-signer: approves and signs kubelet CertificateSigningRequests; health on 10260.
# A static binary built on the host by `make images` (scripts/images.sh) and the
# healthcheck's probe (deploy/probe); FROM scratch, so nothing is pulled.
FROM scratch
LABEL dev.skiff.image=images.sh
COPY .build/bin/probe /usr/local/bin/probe
COPY .build/bin/csr-signer /usr/local/bin/csr-signer
ENTRYPOINT ["/usr/local/bin/csr-signer"]
