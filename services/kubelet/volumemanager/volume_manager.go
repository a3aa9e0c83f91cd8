// Package volumemanager mounts the volumes of the pods on the node before
// their containers start, keeps the ones that follow an API object
// (configMap, secret, downwardAPI, projected) up to date while the pods run,
// and takes them down once the pods are terminated or gone. Mirrors
// k8s.io/kubernetes pkg/kubelet/volumemanager, simplified: the desired state
// of the world is the pods SyncPod has asked to mount (WaitForAttachAndMount),
// the actual state is what is mounted, and the reconciler is Run's periodic
// remount plus the teardown in WaitForUnmount and CleanupOrphanedPodDirs.
// There is no attach/detach: no volume kind here needs it.
package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/kubelet/volume"
	"skiff.dev/services/kubelet/volume/configmap"
	"skiff.dev/services/kubelet/volume/downwardapi"
	"skiff.dev/services/kubelet/volume/emptydir"
	"skiff.dev/services/kubelet/volume/hostpath"
	"skiff.dev/services/kubelet/volume/projected"
	"skiff.dev/services/kubelet/volume/secret"
)

// DefaultResyncPeriod is how often volumes that follow API objects are
// rewritten from them: an updated ConfigMap or Secret reaches the files
// within this period (plus the time of one read).
const DefaultResyncPeriod = 10 * time.Second

// Event reasons, kube's (pkg/kubelet/events).
const (
	FailedMountVolume = "FailedMount"
)

// TokenGetter returns service account tokens (package token's Manager).
type TokenGetter interface {
	GetServiceAccountToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
	DeleteServiceAccountToken(podUID types.UID)
}

// ObjectGetter returns the ConfigMaps and Secrets pods use; a missing object is a
// NotFound error.
type ObjectGetter interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// clientGetter is the ObjectGetter that GETs from the apiserver every time.
type clientGetter struct{ client kubernetes.Interface }

func (g clientGetter) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return g.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (g clientGetter) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return g.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Config configures a VolumeManager.
type Config struct {
	// PodsDir is the kubelet's <root-dir>/pods: volumes go to
	// <PodsDir>/<pod uid>/volumes/<plugin>/<volume>. Required.
	PodsDir string
	// Client reads ConfigMaps and Secrets where Objects is nil. Required.
	Client kubernetes.Interface
	// Objects, when set, gives volumes the ConfigMaps and Secrets they project from
	// the kubelet's watch-based caches (package kubelet/util/manager); nil GETs them
	// through Client each time (kube's Get change-detection strategy).
	Objects ObjectGetter
	// Tokens gives projected serviceAccountToken sources their tokens;
	// required.
	Tokens TokenGetter
	// NodeAllocatable is reported by the downward API for limits a
	// container does not set, and sizes memory-backed emptyDirs.
	NodeAllocatable v1.ResourceList
	// Recorder reports FailedMount events on the pod; nil records none.
	Recorder record.EventRecorder
	// Logger receives the manager's logs; nil means slog.Default().
	Logger *slog.Logger
	// ResyncPeriod is how often remountable volumes are rewritten; 0 means
	// DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// Mounter mounts the volumes' tmpfs; nil means the node's (volume.NodeMounter).
	// Hollow nodes give volume.DirMounter.
	Mounter volume.MountInterface
}

// MountedVolume is one volume of a pod, ready on the host.
type MountedVolume struct {
	// Path is the volume's directory (or file, for a hostPath) on the host.
	Path string
	// ReadOnly volumes must be mounted read-only in every container.
	ReadOnly bool
}

// VolumeManager is the kubelet's volume manager. Safe for concurrent use;
// the volumes of different pods are set up independently.
type VolumeManager struct {
	podsDir         string
	client          kubernetes.Interface
	objects         ObjectGetter
	tokens          TokenGetter
	nodeAllocatable v1.ResourceList
	recorder        record.EventRecorder
	logger          *slog.Logger
	resyncPeriod    time.Duration
	mounter         volume.MountInterface
	plugins         *volume.PluginMgr

	mu   sync.Mutex
	pods map[types.UID]*podVolumes
}

// podVolumes is one pod's part of the desired and actual state.
type podVolumes struct {
	mu      sync.Mutex
	pod     *v1.Pod
	mounted map[string]volume.Mounter
	plugins map[string]volume.Plugin
	removed bool
}

// New returns a VolumeManager with skiff's plugins: emptyDir, hostPath,
// configMap, secret, downwardAPI and projected.
func New(cfg Config) (*VolumeManager, error) {
	switch {
	case cfg.PodsDir == "":
		return nil, errors.New("volumemanager: PodsDir is required")
	case cfg.Client == nil:
		return nil, errors.New("volumemanager: Client is required")
	case cfg.Tokens == nil:
		return nil, errors.New("volumemanager: Tokens is required")
	}
	vm := &VolumeManager{
		podsDir:         cfg.PodsDir,
		client:          cfg.Client,
		objects:         cfg.Objects,
		tokens:          cfg.Tokens,
		nodeAllocatable: cfg.NodeAllocatable,
		recorder:        cfg.Recorder,
		logger:          cfg.Logger,
		resyncPeriod:    cfg.ResyncPeriod,
		mounter:         cfg.Mounter,
		pods:            map[types.UID]*podVolumes{},
	}
	if vm.mounter == nil {
		vm.mounter = volume.NodeMounter{}
	}
	if vm.recorder == nil {
		vm.recorder = eventrecorder.Nop{}
	}
	if vm.logger == nil {
		vm.logger = slog.Default()
	}
	if vm.objects == nil {
		vm.objects = clientGetter{client: cfg.Client}
	}
	if vm.resyncPeriod <= 0 {
		vm.resyncPeriod = DefaultResyncPeriod
	}
	var err error
	vm.plugins, err = volume.NewPluginMgr(
		emptydir.NewPlugin(vm),
		hostpath.NewPlugin(),
		configmap.NewPlugin(vm),
		secret.NewPlugin(vm),
		downwardapi.NewPlugin(vm),
		projected.NewPlugin(vm),
	)
	if err != nil {
		return nil, err
	}
	return vm, nil
}

// GetPodVolumeDir implements volume.Host.
func (vm *VolumeManager) GetPodVolumeDir(podUID types.UID, pluginName, volumeName string) string {
	return volume.PodVolumeDir(vm.podsDir, podUID, pluginName, volumeName)
}

// GetMounter implements volume.Host.
func (vm *VolumeManager) GetMounter() volume.MountInterface { return vm.mounter }

// GetConfigMap implements volume.Host.
func (vm *VolumeManager) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return vm.objects.GetConfigMap(ctx, namespace, name)
}

// GetSecret implements volume.Host.
func (vm *VolumeManager) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return vm.objects.GetSecret(ctx, namespace, name)
}

// GetNodeAllocatable implements volume.Host.
func (vm *VolumeManager) GetNodeAllocatable() v1.ResourceList { return vm.nodeAllocatable }

// GetServiceAccountToken implements volume.Host.
func (vm *VolumeManager) GetServiceAccountToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return vm.tokens.GetServiceAccountToken(ctx, namespace, name, tr)
}

// Run rewrites the remountable volumes of every mounted pod each
// ResyncPeriod until ctx ends. Mirrors the reconciler's remount of volumes
// whose plugin RequiresRemount.
func (vm *VolumeManager) Run(ctx context.Context) {
	t := time.NewTicker(vm.resyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			vm.remountAll(ctx)
		}
	}
}

func (vm *VolumeManager) remountAll(ctx context.Context) {
	vm.mu.Lock()
	pods := make([]*podVolumes, 0, len(vm.pods))
	for _, pv := range vm.pods {
		pods = append(pods, pv)
	}
	vm.mu.Unlock()
	for _, pv := range pods {
		if ctx.Err() != nil {
			return
		}
		pv.mu.Lock()
		if !pv.removed {
			_ = vm.mountPod(ctx, pv, pv.pod, true)
		}
		pv.mu.Unlock()
	}
}

// WaitForAttachAndMount sets up every volume of pod that is not set up yet
// (and, when the pod's labels or annotations changed, rewrites its
// remountable volumes, for a downwardAPI volume). It returns an error naming the
// volumes that could not be set up; each failure is also a FailedMount
// event on the pod. Call it before creating the pod's sandbox. Mirrors
// VolumeManager.WaitForAttachAndMount, synchronous.
func (vm *VolumeManager) WaitForAttachAndMount(ctx context.Context, pod *v1.Pod) error {
	if len(pod.Spec.Volumes) == 0 {
		return nil
	}
	vm.mu.Lock()
	pv, ok := vm.pods[pod.UID]
	if !ok {
		pv = &podVolumes{mounted: map[string]volume.Mounter{}, plugins: map[string]volume.Plugin{}}
		vm.pods[pod.UID] = pv
	}
	vm.mu.Unlock()

	pv.mu.Lock()
	defer pv.mu.Unlock()
	// Only labels and annotations of a pod change what a volume holds (the
	// downward API); the kubelet's own status writes must not cost a reread.
	podChanged := pv.pod != nil && (!maps.Equal(pv.pod.Labels, pod.Labels) || !maps.Equal(pv.pod.Annotations, pod.Annotations))
	pv.pod, pv.removed = pod, false
	return vm.mountPod(ctx, pv, pod, podChanged)
}

// mountPod sets up pod's volumes not mounted yet, and with remount also the
// remountable ones already mounted. pv.mu is held.
func (vm *VolumeManager) mountPod(ctx context.Context, pv *podVolumes, pod *v1.Pod, remount bool) error {
	var unmounted []string
	var errs []error
	for i := range pod.Spec.Volumes {
		spec := &pod.Spec.Volumes[i]
		if _, ok := pv.mounted[spec.Name]; ok && !(remount && pv.plugins[spec.Name].RequiresRemount()) {
			continue
		}
		plugin, mounter, err := vm.newMounter(ctx, spec, pod)
		if err == nil {
			err = mounter.SetUp(ctx)
		}
		if err == nil {
			err = setOwnership(pod, mounter)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			msg := fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", spec.Name, err)
			vm.recorder.Event(pod, v1.EventTypeWarning, FailedMountVolume, msg)
			vm.logger.Info("volume setup failed", "pod", pod.Namespace+"/"+pod.Name, "volume", spec.Name, "err", err)
			if _, ok := pv.mounted[spec.Name]; !ok {
				// A failed remount keeps the old content: only a volume
				// never set up holds the pod back.
				unmounted = append(unmounted, spec.Name)
				errs = append(errs, fmt.Errorf("volume %q: %w", spec.Name, err))
			}
			continue
		}
		pv.mounted[spec.Name], pv.plugins[spec.Name] = mounter, plugin
	}
	if len(unmounted) > 0 {
		return fmt.Errorf("unmounted volumes=[%s]: %w", strings.Join(unmounted, " "), errors.Join(errs...))
	}
	return nil
}

// setOwnership gives a pod-owned volume the pod's fsGroup. The API data
// volumes are re-grouped whole every time (their files are rewritten);
// fsGroupChangePolicy applies to the others, as in kube.
func setOwnership(pod *v1.Pod, mounter volume.Mounter) error {
	sc := pod.Spec.SecurityContext
	attrs := mounter.GetAttributes()
	if sc == nil || sc.FSGroup == nil || !attrs.Managed {
		return nil
	}
	policy := sc.FSGroupChangePolicy
	if attrs.ReadOnly {
		policy = nil
	}
	return volume.SetVolumeOwnership(mounter.GetPath(), *sc.FSGroup, attrs.ReadOnly, policy)
}

// newMounter finds the plugin of spec, a persistentVolumeClaim volume as the volume
// its claim is bound to (see persistentVolumeSpec), and returns its Mounter.
func (vm *VolumeManager) newMounter(ctx context.Context, spec *v1.Volume, pod *v1.Pod) (volume.Plugin, volume.Mounter, error) {
	readOnly := false
	if claim := spec.PersistentVolumeClaim; claim != nil {
		var err error
		if spec, err = vm.persistentVolumeSpec(ctx, spec, pod); err != nil {
			return nil, nil, err
		}
		readOnly = claim.ReadOnly
	}
	plugin, err := vm.plugins.FindPluginBySpec(spec)
	if err != nil {
		return nil, nil, err
	}
	mounter, err := plugin.NewMounter(spec, pod)
	if err != nil {
		return nil, nil, err
	}
	if readOnly {
		mounter = readOnlyMounter{mounter}
	}
	return plugin, mounter, nil
}

// readOnlyMounter is a Mounter whose volume every container mounts read-only (a
// persistentVolumeClaim volume with readOnly).
type readOnlyMounter struct{ volume.Mounter }

func (m readOnlyMounter) GetAttributes() volume.Attributes {
	attrs := m.Mounter.GetAttributes()
	attrs.ReadOnly = true
	return attrs
}

// persistentVolumeSpec turns a persistentVolumeClaim volume into the volume its claim
// is bound to: the claim must exist ("failed to fetch PVC from API server: ..."), not
// be being deleted, be Bound to a volume, and that volume must exist and be bound to
// this claim. skiff mounts hostPath and local PersistentVolumes: both become a hostPath
// volume of the PV's path (a local path must exist). Mirrors the desired state of the
// world populator's createVolumeSpec (getPVCExtractPV, getPVSpec) with the hostPath and
// local plugins.
func (vm *VolumeManager) persistentVolumeSpec(ctx context.Context, spec *v1.Volume, pod *v1.Pod) (*v1.Volume, error) {
	claimName := spec.PersistentVolumeClaim.ClaimName
	pvc, err := vm.client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to fetch PVC from API server: %w", err)
	}
	if pvc.DeletionTimestamp != nil {
		return nil, fmt.Errorf("can't start pod because PVC %s/%s is being deleted", pod.Namespace, claimName)
	}
	if pvc.Status.Phase != v1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil, fmt.Errorf("PVC %s/%s has non-bound phase (%q) or empty pvc.Spec.VolumeName (%q)", pod.Namespace, claimName, pvc.Status.Phase, pvc.Spec.VolumeName)
	}
	pv, err := vm.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to fetch PV %s from API server: %w", pvc.Spec.VolumeName, err)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != pvc.UID {
		return nil, fmt.Errorf("the PV %s is not bound to PVC %s/%s", pv.Name, pod.Namespace, claimName)
	}
	out := &v1.Volume{Name: spec.Name}
	switch {
	case pv.Spec.HostPath != nil:
		out.HostPath = pv.Spec.HostPath.DeepCopy()
	case pv.Spec.Local != nil:
		if _, err := os.Stat(pv.Spec.Local.Path); err != nil {
			return nil, fmt.Errorf("local volume %s: path %q does not exist", pv.Name, pv.Spec.Local.Path)
		}
		out.HostPath = &v1.HostPathVolumeSource{Path: pv.Spec.Local.Path}
	default:
		return nil, fmt.Errorf("persistent volume %s: only hostPath and local volumes are supported by this kubelet", pv.Name)
	}
	return out, nil
}

// GetMountedVolumesForPod returns the pod's set-up volumes by name. Mirrors
// VolumeManager.GetMountedVolumesForPod.
func (vm *VolumeManager) GetMountedVolumesForPod(podUID types.UID) map[string]MountedVolume {
	vm.mu.Lock()
	pv, ok := vm.pods[podUID]
	vm.mu.Unlock()
	if !ok {
		return nil
	}
	pv.mu.Lock()
	defer pv.mu.Unlock()
	out := make(map[string]MountedVolume, len(pv.mounted))
	for name, m := range pv.mounted {
		out[name] = MountedVolume{Path: m.GetPath(), ReadOnly: m.GetAttributes().ReadOnly}
	}
	return out
}

// WaitForUnmount takes down every volume of pod, whose containers must all
// have stopped, removes the pod's directory and forgets its tokens. Mirrors
// VolumeManager.WaitForUnmount followed by the pod directory cleanup.
func (vm *VolumeManager) WaitForUnmount(_ context.Context, pod *v1.Pod) error {
	vm.mu.Lock()
	pv, ok := vm.pods[pod.UID]
	vm.mu.Unlock()
	if ok {
		pv.mu.Lock()
		defer pv.mu.Unlock()
		pv.removed = true
	}
	if err := vm.tearDownPodDir(pod.UID); err != nil {
		return err
	}
	vm.mu.Lock()
	if vm.pods[pod.UID] == pv {
		delete(vm.pods, pod.UID)
	}
	vm.mu.Unlock()
	vm.tokens.DeleteServiceAccountToken(pod.UID)
	return nil
}

// CleanupOrphanedPodDirs takes down the volumes and removes the directories
// of pods neither kept (keep: pods desired or still running) nor mounted
// here — the leftovers of force-deleted pods or of a previous kubelet.
// Mirrors Kubelet.cleanupOrphanedPodDirs.
func (vm *VolumeManager) CleanupOrphanedPodDirs(keep map[types.UID]bool) error {
	entries, err := os.ReadDir(vm.podsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", vm.podsDir, err)
	}
	var errs []error
	for _, e := range entries {
		// Pod log directories (<namespace>_<name>_<uid>) share this
		// directory; a pod UID never holds "_".
		if !e.IsDir() || strings.Contains(e.Name(), "_") {
			continue
		}
		uid := types.UID(e.Name())
		vm.mu.Lock()
		_, mounted := vm.pods[uid]
		vm.mu.Unlock()
		if keep[uid] || mounted {
			continue
		}
		vm.logger.Info("cleaning up orphaned pod directory", "podUID", uid)
		if err := vm.tearDownPodDir(uid); err != nil {
			errs = append(errs, err)
		}
		vm.tokens.DeleteServiceAccountToken(uid)
	}
	return errors.Join(errs...)
}

// tearDownPodDir tears down every volume found on disk for pod uid (so
// volumes a previous kubelet set up are covered too), then removes the pod
// directory once nothing is mounted beneath it.
func (vm *VolumeManager) tearDownPodDir(uid types.UID) error {
	podDir := filepath.Join(vm.podsDir, string(uid))
	volumesDir := filepath.Join(podDir, "volumes")
	pluginDirs, err := os.ReadDir(volumesDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("list %s: %w", volumesDir, err)
	}
	var errs []error
	for _, pd := range pluginDirs {
		vols, err := os.ReadDir(filepath.Join(volumesDir, pd.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		plugin, pluginErr := vm.plugins.FindPluginByName(volume.UnescapePluginName(pd.Name()))
		for _, v := range vols {
			var err error
			if pluginErr != nil {
				err = vm.mounter.TearDownDir(filepath.Join(volumesDir, pd.Name(), v.Name()))
			} else {
				var u volume.Unmounter
				if u, err = plugin.NewUnmounter(v.Name(), uid); err == nil {
					err = u.TearDown()
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("tear down volume %s of pod %s: %w", v.Name(), uid, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := removeAllOneFilesystem(podDir); err != nil {
		return fmt.Errorf("remove pod directory: %w", err)
	}
	return nil
}

// removeAllOneFilesystem removes path and everything beneath it without crossing into
// another filesystem: at a directory that is a mount point (on another device than
// its parent, such as a volume's tmpfs that its teardown left mounted) it stops with
// an error, so nothing is ever removed through a mount. It looks only at the pod's own
// directories, where reading /proc/self/mountinfo per pod cost time in proportion to
// every mount on the machine. Like kube's IsLikelyNotMountPoint, it does not see a bind
// mount of the same filesystem; the kubelet makes none under a pod's directory (the
// runtimes bind volumes into their containers' own roots). Mirrors kube's
// removeall.RemoveAllOneFilesystem.
func removeAllOneFilesystem(path string) error {
	err := os.Remove(path)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	info, lerr := os.Lstat(path)
	if lerr != nil {
		if errors.Is(lerr, fs.ErrNotExist) {
			return nil
		}
		return lerr
	}
	if !info.IsDir() {
		return err
	}
	var self, parent unix.Stat_t
	if err := unix.Lstat(path, &self); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if err := unix.Lstat(filepath.Dir(path), &parent); err != nil {
		return fmt.Errorf("stat %s: %w", filepath.Dir(path), err)
	}
	if self.Dev != parent.Dev {
		return fmt.Errorf("cannot remove %s: it is a mount point", path)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := removeAllOneFilesystem(filepath.Join(path, e.Name())); err != nil {
			return err
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// mountsUnder lists the mount points at or beneath dir (from
// /proc/self/mountinfo), so a pod directory is never removed through a
// mount.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	slices.Sort(out)
	return out, nil
}

// unescapeMountPath decodes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// UnmountAll detaches every mount beneath podsDir (the tmpfs of secret,
// projected and memory-backed emptyDir volumes), deepest first, leaving the
// directories. For a node that stops with its containers, as the all-in-one
// does on Ctrl-C, so nothing stays mounted in its data directory; the next
// kubelet sets the volumes up again for the pods it still runs.
func UnmountAll(podsDir string) error {
	mounts, err := mountsUnder(podsDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range slices.Backward(mounts) {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}
