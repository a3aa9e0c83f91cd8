# busybox built offline: Debian's static busybox (scripts/busybox.sh) with a link per
# applet in /bin, FROM scratch, as the official image lays it out; its default command is
# sh. local-path-provisioner's helper pods run it (image busybox) to make and remove
# volume directories.
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CMD ["sh"]
