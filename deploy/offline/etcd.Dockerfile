# quay.io/coreos/etcd built offline: etcd and etcdctl as static binaries at the paths the
# official image uses (/usr/local/bin), FROM scratch so nothing is pulled.
FROM scratch
COPY etcd etcdctl /usr/local/bin/
WORKDIR /var/lib/etcd
EXPOSE 2379 2380
CMD ["/usr/local/bin/etcd"]
