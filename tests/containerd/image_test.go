package containerd

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Image names the suite builds: no registry can be reached, so both are made
// here from Debian's busybox-static and imported with ctr.
const (
	busyboxImage = "skiff.test/busybox:1"
	pauseImage   = "skiff.test/pause:1"
)

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

// ociArchive is an OCI image layout being built in memory.
type ociArchive struct {
	blobs map[string][]byte
	index []descriptor
}

func (a *ociArchive) add(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	d := "sha256:" + hex.EncodeToString(sum[:])
	a.blobs[d] = data
	return descriptor{MediaType: mediaType, Digest: d, Size: len(data)}
}

// buildImages writes an OCI archive holding busyboxImage (busybox with a
// link per applet, Cmd sh) and pauseImage (the same layer, sleeping for
// ever) to path.
func buildImages(path, busybox string) error {
	layer, err := busyboxLayer(busybox)
	if err != nil {
		return err
	}
	return writeImages(path, []ociImage{
		{name: busyboxImage, layer: layer, cmd: []string{"sh"}, env: []string{"PATH=/bin"}},
		{name: pauseImage, layer: layer, cmd: []string{"sleep", "2147483647"}, env: []string{"PATH=/bin"}},
	})
}

// ociImage is one single-layer image of an archive: its name, the layer (an
// uncompressed tar), Cmd and Env.
type ociImage struct {
	name     string
	layer    []byte
	cmd, env []string
}

// busyboxLayer is a layer with busybox at /bin/busybox, a link per applet in /bin,
// the usual top directories and an /etc/passwd for root.
func busyboxLayer(busybox string) ([]byte, error) {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	now := time.Unix(0, 0)
	for _, dir := range []string{"bin/", "etc/", "proc/", "sys/", "dev/", "root/", "var/", "www/"} {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: now})
	}
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: now})
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin)), ModTime: now}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: now})
	}
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\n")
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, Size: int64(len(passwd)), ModTime: now})
	_, _ = tw.Write(passwd)
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return layer.Bytes(), nil
}

// binaryLayer is a layer holding one executable at path (and /tmp).
func binaryLayer(binary, path string) ([]byte, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	now := time.Unix(0, 0)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: now})
	rel := strings.TrimPrefix(path, "/")
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.Join(parts[:i], "/") + "/", Mode: 0o755, ModTime: now})
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o755, Size: int64(len(bin)), ModTime: now}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return layer.Bytes(), nil
}

// writeImages writes images as an OCI archive (for ctr images import) to path.
func writeImages(path string, images []ociImage) error {
	now := time.Unix(0, 0)
	a := &ociArchive{blobs: map[string][]byte{}}
	platform := map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	for _, img := range images {
		diffID := sha256.Sum256(img.layer)
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
		_, _ = zw.Write(img.layer)
		_ = zw.Close()
		layerDesc := a.add("application/vnd.oci.image.layer.v1.tar+gzip", gz.Bytes())
		config, _ := json.Marshal(map[string]any{
			"architecture": runtime.GOARCH, "os": "linux",
			"config": map[string]any{"Env": img.env, "Cmd": img.cmd},
			"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
		})
		configDesc := a.add("application/vnd.oci.image.config.v1+json", config)
		manifest, _ := json.Marshal(map[string]any{
			"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
			"config": configDesc, "layers": []descriptor{layerDesc},
		})
		m := a.add("application/vnd.oci.image.manifest.v1+json", manifest)
		m.Annotations = map[string]string{"io.containerd.image.name": img.name, "org.opencontainers.image.ref.name": img.name[strings.LastIndex(img.name, ":")+1:]}
		m.Platform = platform
		a.index = append(a.index, m)
	}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": a.index})

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := tar.NewWriter(f)
	write := func(name string, data []byte) error {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: now}); err != nil {
			return err
		}
		_, err := w.Write(data)
		return err
	}
	if err := write("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := write("index.json", index); err != nil {
		return err
	}
	for d, data := range a.blobs {
		if err := write("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), data); err != nil {
			return err
		}
	}
	return w.Close()
}
