package config

import (
	"context"
	"crypto/md5" //nolint:gosec // kube's static pod UID is an md5 of the manifest; not a security use.
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"skiff.dev/services/internal/apis/core/defaults"
	"skiff.dev/services/internal/apis/core/validation"
	kubetypes "skiff.dev/services/kubelet/types"
)

// DefaultFileCheckFrequency is how often the static pod directory is read
// again (kubelet's --file-check-frequency).
const DefaultFileCheckFrequency = 20 * time.Second

// sourceFile reads static pod manifests (one Pod per file, YAML or JSON) from
// a directory, or a single file, and turns each snapshot into ADD and REMOVE
// updates of source "file". A manifest that changes gets a new UID, so the
// old pod is removed and the new one added, as in kube. Mirrors kubelet's
// config/file.go sourceFile (polling, without inotify).
type sourceFile struct {
	path     string
	nodeName string
	period   time.Duration
	logger   *slog.Logger
	send     func(PodUpdate)
	// pods are the static pods of the last snapshot, by UID.
	pods map[types.UID]*v1.Pod
	// seen says whether the first snapshot was delivered.
	seen chan struct{}
}

// run reads the directory at once and then every period until ctx ends.
func (s *sourceFile) run(ctx context.Context) {
	t := time.NewTicker(s.period)
	defer t.Stop()
	for {
		s.sync()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sync reads the manifests and sends what changed since the last snapshot.
func (s *sourceFile) sync() {
	pods, err := s.extractFromPath()
	if err != nil {
		if !os.IsNotExist(err) {
			s.logger.Error("unable to read static pod manifests", "path", s.path, "err", err)
			return
		}
		// A missing path is no pods.
		pods = nil
	}
	now := time.Now().Format(time.RFC3339Nano)
	current := make(map[types.UID]*v1.Pod, len(pods))
	var added, removed []*v1.Pod
	for _, p := range pods {
		if old, ok := s.pods[p.UID]; ok {
			current[p.UID] = old
			continue
		}
		p.Annotations[kubetypes.ConfigFirstSeenAnnotationKey] = now
		current[p.UID] = p
		added = append(added, p)
	}
	for uid, p := range s.pods {
		if _, ok := current[uid]; !ok {
			removed = append(removed, p)
		}
	}
	s.pods = current
	if len(removed) > 0 {
		s.send(PodUpdate{Pods: removed, Op: REMOVE, Source: kubetypes.FileSource})
	}
	if len(added) > 0 {
		s.send(PodUpdate{Pods: added, Op: ADD, Source: kubetypes.FileSource})
	}
	select {
	case <-s.seen:
	default:
		close(s.seen)
	}
}

// extractFromPath reads every manifest under path (a directory's regular
// files, skipping hidden ones, in name order; or path itself). A file that
// does not hold a valid Pod is logged and skipped; two files naming the same
// pod keep the first.
func (s *sourceFile) extractFromPath() ([]*v1.Pod, error) {
	info, err := os.Stat(s.path)
	if err != nil {
		return nil, err
	}
	files := []string{s.path}
	if info.IsDir() {
		entries, err := os.ReadDir(s.path)
		if err != nil {
			return nil, err
		}
		files = files[:0]
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
				continue
			}
			files = append(files, filepath.Join(s.path, e.Name()))
		}
		slices.Sort(files)
	}
	var pods []*v1.Pod
	names := map[string]string{}
	for _, f := range files {
		pod, err := readStaticPod(f, s.nodeName)
		if err != nil {
			s.logger.Error("could not process manifest file", "path", f, "err", err)
			continue
		}
		full := pod.Namespace + "/" + pod.Name
		if other, ok := names[full]; ok {
			s.logger.Error("static pod defined twice, ignoring the second", "pod", full, "file", f, "first", other)
			continue
		}
		names[full] = f
		pods = append(pods, pod)
	}
	return pods, nil
}

// readStaticPod decodes one manifest and makes it a static pod of nodeName:
// defaulted and validated as the API server would, named
// "<name>-<nodename>", in namespace default unless it says otherwise,
// bound to the node, with a UID hashed from the manifest, the node and the
// file, the config.hash (= UID) and config.source=file annotations, and a
// toleration of every NoExecute taint. Mirrors config/common.go
// tryDecodeSinglePod and applyDefaults.
func readStaticPod(path, nodeName string) (*v1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pod v1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	if pod.APIVersion != "v1" || pod.Kind != "Pod" {
		return nil, fmt.Errorf("%s: want apiVersion v1 kind Pod, got apiVersion %q kind %q", path, pod.APIVersion, pod.Kind)
	}
	if pod.Name == "" {
		return nil, errors.New(path + ": metadata.name is required")
	}
	if pod.UID == "" {
		h := md5.New() //nolint:gosec // an identifier, as kube's.
		h.Write(data)
		fmt.Fprintf(h, "host:%s", nodeName)
		fmt.Fprintf(h, "file:%s", path)
		pod.UID = types.UID(hex.EncodeToString(h.Sum(nil)))
	}
	pod.Name = pod.Name + "-" + strings.ToLower(nodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[kubetypes.ConfigHashAnnotationKey] = string(pod.UID)
	pod.Annotations[kubetypes.ConfigSourceAnnotationKey] = kubetypes.FileSource
	// A static pod is not evicted for its node's problems.
	if !slices.ContainsFunc(pod.Spec.Tolerations, func(t v1.Toleration) bool {
		return t.Key == "" && t.Operator == v1.TolerationOpExists && t.Effect == v1.TaintEffectNoExecute
	}) {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute})
	}
	defaults.SetDefaults(&pod)
	if errs := validation.ValidatePod(&pod); len(errs) > 0 {
		return nil, fmt.Errorf("%s: invalid pod: %v", path, errs.ToAggregate())
	}
	pod.Status = v1.PodStatus{Phase: v1.PodPending}
	return &pod, nil
}
