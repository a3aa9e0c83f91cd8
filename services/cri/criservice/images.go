package criservice

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// image is a "pulled" image: the built-in runtimes have no registry and no
// layers, only the record that the kubelet pulled a name.
type image struct {
	id   string // "sha256:" + hex of sha256(name)
	name string // normalized reference
	spec *runtimeapi.ImageSpec
}

// repoTags and repoDigests follow containerd: a tagged name is a repo tag,
// and the image's digest form is repo@<id>.
func (im *image) repoTags() []string {
	if strings.Contains(im.name, "@") {
		return nil
	}
	return []string{im.name}
}

func (im *image) repoDigests() []string {
	repo, digest, ok := strings.Cut(im.name, "@")
	if !ok {
		digest = im.id
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	return []string{repo + "@" + digest}
}

// ref is what containerd reports as a container's ImageRef: the repo digest.
func (im *image) ref() string { return im.repoDigests()[0] }

func (im *image) proto() *runtimeapi.Image {
	return &runtimeapi.Image{
		Id:          im.id,
		RepoTags:    im.repoTags(),
		RepoDigests: im.repoDigests(),
		Spec:        im.spec,
	}
}

// NormalizeImage returns the fully qualified form of an image reference, as
// the Docker reference library normalizes it: "busybox" is
// "docker.io/library/busybox:latest", "me/app:v1" is "docker.io/me/app:v1",
// a reference with a digest gets no default tag. It rejects empty references,
// whitespace and upper-case repository paths.
func NormalizeImage(ref string) (string, error) {
	if ref == "" || strings.ContainsAny(ref, " \t\r\n") {
		return "", fmt.Errorf("invalid image reference %q", ref)
	}
	name, digest, hasDigest := strings.Cut(ref, "@")
	if hasDigest && !validDigest(digest) {
		return "", fmt.Errorf("invalid image reference %q: bad digest", ref)
	}
	domain, path := "docker.io", name
	if first, rest, ok := strings.Cut(name, "/"); ok &&
		(strings.ContainsAny(first, ".:") || first == "localhost" || first != strings.ToLower(first)) {
		domain, path = first, rest
	}
	if domain == "index.docker.io" {
		domain = "docker.io"
	}
	tag := ""
	if i := strings.LastIndexByte(path, ':'); i >= 0 {
		path, tag = path[:i], path[i+1:]
		if tag == "" {
			return "", fmt.Errorf("invalid image reference %q: empty tag", ref)
		}
	}
	if path == "" || strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/") || strings.Contains(path, "//") {
		return "", fmt.Errorf("invalid image reference %q: bad repository path", ref)
	}
	if path != strings.ToLower(path) {
		return "", fmt.Errorf("invalid image reference %q: repository name must be lowercase", ref)
	}
	if domain == "docker.io" && !strings.Contains(path, "/") {
		path = "library/" + path
	}
	out := domain + "/" + path
	switch {
	case tag != "":
		out += ":" + tag
	case !hasDigest:
		out += ":latest"
	}
	if hasDigest {
		out += "@" + digest
	}
	return out, nil
}

func validDigest(d string) bool {
	algo, hexPart, ok := strings.Cut(d, ":")
	if !ok || algo == "" || len(hexPart) < 32 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil
}

func imageID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// findImageLocked resolves ref the ways containerd does: an image ID (with or
// without "sha256:"), a name (normalized first) or a repo digest. It returns
// nil when nothing matches.
func (s *Service) findImageLocked(ref string) *image {
	if im, ok := s.images[ref]; ok {
		return im
	}
	if im, ok := s.images["sha256:"+ref]; ok {
		return im
	}
	name, err := NormalizeImage(ref)
	if err != nil {
		return nil
	}
	for _, im := range s.images {
		if im.name == name || slices.Contains(im.repoDigests(), name) {
			return im
		}
	}
	return nil
}

// PullImage records the image as present (there is no registry) and returns
// its ref, "sha256:" + hex(sha256(normalized name)). Pulling a present image
// returns the same ref. An invalid reference is codes.InvalidArgument.
func (s *Service) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref := req.GetImage().GetImage()
	name, err := NormalizeImage(ref)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if im := s.findImageLocked(name); im != nil {
		return &runtimeapi.PullImageResponse{ImageRef: im.id}, nil
	}
	im := &image{id: imageID(name), name: name, spec: &runtimeapi.ImageSpec{
		Image:       name,
		Annotations: req.GetImage().GetAnnotations(),
	}}
	s.images[im.id] = im
	return &runtimeapi.PullImageResponse{ImageRef: im.id}, nil
}

// ImageStatus returns the image, or a response with a nil Image when it has
// not been pulled — not an error, so the kubelet's IfNotPresent check works as
// with containerd.
func (s *Service) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	im := s.findImageLocked(req.GetImage().GetImage())
	if im == nil {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: im.proto()}, nil
}

// ListImages lists pulled images, or only the one matching the filter's image.
func (s *Service) ListImages(_ context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &runtimeapi.ListImagesResponse{}
	if ref := req.GetFilter().GetImage().GetImage(); ref != "" {
		if im := s.findImageLocked(ref); im != nil {
			resp.Images = append(resp.Images, im.proto())
		}
		return resp, nil
	}
	for _, im := range s.images {
		resp.Images = append(resp.Images, im.proto())
	}
	slices.SortFunc(resp.Images, func(a, b *runtimeapi.Image) int { return strings.Compare(a.Id, b.Id) })
	return resp, nil
}

// RemoveImage forgets the image. Removing an absent image is not an error, as
// CRI requires; containers created from it keep running.
func (s *Service) RemoveImage(_ context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if im := s.findImageLocked(req.GetImage().GetImage()); im != nil {
		delete(s.images, im.id)
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}
