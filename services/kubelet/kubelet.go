// Package kubelet is skiff's node agent: it registers the Node, keeps its
// status and Lease fresh, watches the pods bound to the node, and runs them
// through a CRI runtime, reporting their status back to the API server.
//
// The structure is the Kubernetes kubelet's, with the same names: one
// syncLoop whose syncLoopIteration dispatches config updates (package
// config: API server and static pod file sources), PLEG events (package
// pleg), probe results (package prober), resync and housekeeping ticks to
// the pod workers (package podworkers), which call SyncPod,
// SyncTerminatingPod and SyncTerminatedPod here; those use the CRI client
// (package kuberuntime, which runs lifecycle hooks through package
// lifecycle) and the status manager (package status), and keep static pods'
// mirror pods current. Mirrors kubelet's pkg/kubelet/kubelet.go.
package kubelet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/serving"
	"skiff.dev/services/internal/tracing"
	"skiff.dev/services/kubelet/cm"
	"skiff.dev/services/kubelet/config"
	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/eviction"
	"skiff.dev/services/kubelet/kuberuntime"
	"skiff.dev/services/kubelet/logs"
	"skiff.dev/services/kubelet/network/dns"
	"skiff.dev/services/kubelet/nodelease"
	"skiff.dev/services/kubelet/nodestatus"
	"skiff.dev/services/kubelet/pleg"
	kubepod "skiff.dev/services/kubelet/pod"
	"skiff.dev/services/kubelet/podworkers"
	"skiff.dev/services/kubelet/prober"
	proberesults "skiff.dev/services/kubelet/prober/results"
	"skiff.dev/services/kubelet/runtimeclass"
	"skiff.dev/services/kubelet/status"
	"skiff.dev/services/kubelet/token"
	kubetypes "skiff.dev/services/kubelet/types"
	"skiff.dev/services/kubelet/util/manager"
	"skiff.dev/services/kubelet/volume"
	"skiff.dev/services/kubelet/volumemanager"
)

// KubeletVersion is the version the kubelet reports in
// node.status.nodeInfo.kubeletVersion: the Kubernetes release whose
// behaviour it follows.
const KubeletVersion = "v1.32.4"

// KubeletPort is the kubelet API port reported in
// node.status.daemonEndpoints.
const KubeletPort = 10250

// Defaults of Config's durations, Kubernetes' own.
const (
	DefaultSyncFrequency             = time.Minute
	DefaultNodeStatusUpdateFrequency = 10 * time.Second
	DefaultLeaseDuration             = 40 * time.Second
	DefaultRootDir                   = "/var/lib/kubelet"
)

const (
	// housekeepingPeriod is how often pods that are no longer wanted are
	// cleaned up.
	housekeepingPeriod = 2 * time.Second
	// containerGCPeriod is how often exited containers and sandboxes are
	// collected when nothing has died since (kube's ContainerGCPeriod).
	containerGCPeriod = time.Minute
	// runtimeUpPeriod is how often the runtime's Status is checked.
	runtimeUpPeriod = 5 * time.Second
	// runtimeNotReadyPeriod is how often it is checked while the runtime or its
	// network is not ready (skiff's addition: a runtime whose CNI config appears
	// right after the pod CIDR is handed over is seen ready within this, not
	// runtimeUpPeriod later).
	runtimeNotReadyPeriod = 500 * time.Millisecond
	// backOffPeriod and maxContainerBackOff bound the crash-loop backoff.
	backOffPeriod       = 10 * time.Second
	maxContainerBackOff = 300 * time.Second
)

// Config configures a Kubelet.
type Config struct {
	// NodeName is the Node object's name and the Lease's holder; required.
	NodeName string
	// AllowedUnsafeSysctls are the sysctls besides kube's safe ones a pod may set
	// (--allowed-unsafe-sysctls): names, or prefixes ending in * ("net.core.*").
	AllowedUnsafeSysctls []string
	// Client is a clientset to the API server; required.
	Client kubernetes.Interface
	// RuntimeEndpoint is the CRI socket, "unix:///path" or a path; required unless
	// RuntimeConn is set.
	RuntimeEndpoint string
	// RuntimeConn, when set, is the CRI connection to use instead of dialling
	// RuntimeEndpoint (hollow nodes pass a cri.InProcessConn to their sim runtime). Run
	// closes it when it is an io.Closer.
	RuntimeConn grpc.ClientConnInterface
	// VolumeMounter mounts the tmpfs of memory-backed volumes; nil means the node's
	// (volume.NodeMounter). Hollow nodes pass volume.DirMounter, which mounts nothing.
	VolumeMounter volume.MountInterface
	// RootDir holds the kubelet's state; pod logs go to
	// RootDir/pods/<namespace>_<name>_<uid>/<container>/<attempt>.log, laid
	// out as /var/log/pods. "" means /var/lib/kubelet.
	RootDir string
	// NodeIP is the InternalIP reported for the node (and the pods' hostIP);
	// "" means the first non-loopback IPv4 address, or 127.0.0.1.
	NodeIP string
	// NodeLabels are extra node labels; kubernetes.io/hostname,
	// kubernetes.io/os and kubernetes.io/arch are always set.
	NodeLabels map[string]string
	// Capacity overrides entries of the node's capacity (and allocatable);
	// the rest comes from the machine: cpu=NumCPU, memory=MemTotal,
	// ephemeral-storage of RootDir's filesystem, pods=110.
	Capacity v1.ResourceList
	// SyncFrequency is how often a running pod is resynced without any
	// event (default 1 min).
	SyncFrequency time.Duration
	// NodeStatusUpdateFrequency is how often the node status is written
	// (default 10 s); it is also written at once when readiness changes.
	NodeStatusUpdateFrequency time.Duration
	// LeaseDuration is the node Lease's duration (default 40 s); the lease
	// is renewed every quarter of it.
	LeaseDuration time.Duration
	// GenericPLEG makes the PLEG relist the runtime every second even when the
	// runtime streams container events (kube's default: its EventedPLEG feature
	// gate is off). Without it the Evented PLEG reads the events and relists
	// every 5 min, falling back to the generic PLEG when the runtime has no
	// event stream (containerd before 1.7) or the stream keeps failing.
	GenericPLEG bool
	// HealthzAddr, if set, is where a plain-HTTP /healthz is served, e.g.
	// ":10248"; "" serves nothing.
	HealthzAddr string
	// ServerAddr, if set, is where the kubelet API listens (HTTPS: exec,
	// attach, portForward, containerLogs, healthz; package server), e.g.
	// ":10250"; its real port is reported in
	// status.daemonEndpoints.kubeletEndpoint. "" serves none.
	ServerAddr string
	// ServerTLS is the kubelet API's TLS config: the serving certificate
	// (Certificates or GetCertificate) and the cluster CA as ClientCAs;
	// required with ServerAddr.
	ServerTLS *tls.Config
	// Logger receives the kubelet's logs; nil means slog.Default().
	Logger *slog.Logger
	// Recorder reports the kubelet's events (Pulling, Pulled, Created, Started,
	// Killing, BackOff, Unhealthy, FailedPostStartHook, FailedPreStopHook, NodeReady,
	// RegisteredNode); nil records none.
	Recorder record.EventRecorder
	// EvictionHard are the thresholds below which the node reports
	// MemoryPressure, DiskPressure or PIDPressure (pods are not evicted);
	// nil means eviction.DefaultEvictionHard, empty none.
	EvictionHard []eviction.Threshold
	// TracerProvider traces SyncPod and every CRI call inside the pod's trace;
	// nil means the global provider.
	TracerProvider trace.TracerProvider
	// PodManifestPath is the static pod directory (or file), kube's
	// staticPodPath: each manifest is a pod the kubelet runs on its own,
	// named "<name>-<node>", shown in the API server as a mirror pod. ""
	// means none.
	PodManifestPath string
	// FileCheckFrequency is how often PodManifestPath is read again
	// (default 20 s).
	FileCheckFrequency time.Duration
	// PodCIDR is the pod IP range used while the Node's spec.podCIDR is
	// empty (kube's --pod-cidr, for a kubelet without a controller-manager
	// allocating ranges); the Node's spec.podCIDR(s) win when set. "" waits
	// for spec.podCIDR.
	PodCIDR string
	// ClusterDNS are the cluster DNS server IPs given to ClusterFirst pods
	// (kube's --cluster-dns); empty: ClusterFirst pods get the node's
	// resolver, as kubelet falls back to dnsPolicy Default.
	ClusterDNS []string
	// ClusterDomain is the cluster's DNS domain (default "cluster.local").
	ClusterDomain string
	// CgroupDriver is kube's --cgroup-driver, the naming of the pods' cgroups
	// (the sandbox's linux.cgroup_parent): "" or cm.CgroupDriverCgroupfs,
	// or cm.CgroupDriverSystemd. As in kube, the runtime's answer to CRI
	// RuntimeConfig wins; this applies when it does not implement the RPC.
	CgroupDriver cm.CgroupDriver
	// ResolverConfig is the node's resolv.conf that dnsPolicy Default (and
	// the search path of ClusterFirst) start from; "" means /etc/resolv.conf.
	ResolverConfig string
	// ContainerLogMaxSize is the size in bytes past which a running
	// container's log is rotated (kube's containerLogMaxSize); 0 means 10 MiB.
	ContainerLogMaxSize int64
	// ContainerLogMaxFiles is how many log files a container keeps, the
	// live one included (kube's containerLogMaxFiles); 0 means 5, else >= 2.
	ContainerLogMaxFiles int
}

// Kubelet is one node's agent. Several may run in one process: a Kubelet
// shares no state with another. Mirrors kubelet's Kubelet.
type Kubelet struct {
	nodeName                  string
	kubeClient                kubernetes.Interface
	rootDir                   string
	clusterDomain             string // ClusterDomain, for pods' fully qualified host names
	podLogsDir                string
	nodeIP                    string
	nodeLabels                map[string]string
	syncFrequency             time.Duration
	nodeStatusUpdateFrequency time.Duration
	healthzAddr               string
	serverListener            net.Listener
	serverTLS                 *tls.Config
	logger                    *slog.Logger
	recorder                  record.EventRecorder
	tracer                    trace.Tracer

	allowedUnsafeSysctls []string
	// services feeds the service links of pods' environments (serviceLister, with
	// serviceHasSynced); started by run.
	services         informers.SharedInformerFactory
	serviceLister    corelisters.ServiceLister
	serviceHasSynced cache.InformerSynced

	conn                grpc.ClientConnInterface // closed by run when an io.Closer
	containerRuntime    *kuberuntime.Manager
	podCache            *container.Cache
	pleg                pleg.PodLifecycleEventGenerator
	podManager          *kubepod.Manager
	podWorkers          *podworkers.PodWorkers
	workQueue           *podworkers.WorkQueue
	statusManager       *status.Manager
	mirrorPodClient     *kubepod.MirrorClient
	probeManager        *prober.Manager
	livenessManager     *proberesults.Manager
	readinessManager    *proberesults.Manager
	startupManager      *proberesults.Manager
	podConfig           *config.PodConfig
	reasonCache         *ReasonCache
	runtimeState        *runtimeState
	containerLogManager *logs.ContainerLogManager
	crashLoopBackOff    *flowcontrol.Backoff
	nodeLeaseController *nodelease.Controller
	setNodeStatusFuncs  []nodestatus.Setter
	volumeManager       *volumemanager.VolumeManager
	evictionManager     *eviction.Manager
	tokenManager        *token.Manager
	// configMapManager and secretManager keep the ConfigMaps and Secrets the
	// pods use current, one watch per object (kube's watch-based managers).
	configMapManager *manager.Manager[*v1.ConfigMap]
	secretManager    *manager.Manager[*v1.Secret]
	// nodeAllocatable is what the downward API reports for limits a
	// container does not set.
	nodeAllocatable v1.ResourceList

	// podCIDRFallback is Config.PodCIDR; podCIDR is the range last handed
	// to the runtime (guarded by podCIDRMu).
	podCIDRFallback string
	// cgroupDriver names pods' cgroups: Config.CgroupDriver until the runtime
	// has answered CRI RuntimeConfig (cgroupDriverResolved), then its answer.
	// The runtime counts as up only once it has, so no sandbox is created with
	// a name the runtime would not take.
	cgroupDriverMu       sync.Mutex
	cgroupDriver         cm.CgroupDriver
	cgroupDriverResolved bool
	podCIDRMu            sync.Mutex
	podCIDR              string
	podCIDRWaitLogged    bool

	// nodeStatusUpdateCh asks for an immediate node status update.
	nodeStatusUpdateCh chan struct{}

	// Housekeeping collects exited containers and sandboxes when
	// containerGCDue (a container died, or a pod's worker ended, since the last
	// collection) or containerGCPeriod after lastContainerGC. workingPods are
	// the pods with a worker at the last housekeeping. Only the sync loop
	// touches these.
	containerGCDue  bool
	lastContainerGC time.Time
	workingPods     map[types.UID]podworkers.PodWorkerSync

	runOnce sync.Once
}

// New validates cfg and builds a Kubelet; nothing runs until Run, which also
// closes the runtime connection New opens (lazily: no dial happens before the
// first call) and the kubelet API's listener (opened here, with ServerAddr, so
// the node status reports its real port). Errors name the missing or invalid
// field, or the address that cannot be listened on.
func New(cfg Config) (*Kubelet, error) {
	switch {
	case cfg.NodeName == "":
		return nil, errors.New("kubelet: NodeName is required")
	case cfg.Client == nil:
		return nil, errors.New("kubelet: Client is required")
	case cfg.RuntimeEndpoint == "" && cfg.RuntimeConn == nil:
		return nil, errors.New("kubelet: RuntimeEndpoint or RuntimeConn is required")
	}
	if cfg.RootDir == "" {
		cfg.RootDir = DefaultRootDir
	}
	if cfg.NodeIP == "" {
		cfg.NodeIP = nodestatus.DefaultNodeIP()
	}
	if cfg.SyncFrequency <= 0 {
		cfg.SyncFrequency = DefaultSyncFrequency
	}
	if cfg.NodeStatusUpdateFrequency <= 0 {
		cfg.NodeStatusUpdateFrequency = DefaultNodeStatusUpdateFrequency
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "kubelet", "node", cfg.NodeName)

	if cfg.ServerAddr != "" && (cfg.ServerTLS == nil || cfg.ServerTLS.ClientCAs == nil) {
		return nil, errors.New("kubelet: ServerTLS with ClientCAs is required with ServerAddr")
	}

	conn, err := dialRuntime(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubelet: %w", err)
	}
	// The API listens from New on, so the port reported in the node status
	// is the real one (":0" picks a free port).
	kubeletPort := int32(KubeletPort)
	var serverListener net.Listener
	if cfg.ServerAddr != "" {
		serverListener, err = net.Listen("tcp", cfg.ServerAddr)
		if err != nil {
			closeRuntime(conn)
			return nil, fmt.Errorf("kubelet: listen for the kubelet API: %w", err)
		}
		kubeletPort = int32(serverListener.Addr().(*net.TCPAddr).Port)
	}

	kl := &Kubelet{
		nodeName:                  cfg.NodeName,
		kubeClient:                cfg.Client,
		allowedUnsafeSysctls:      cfg.AllowedUnsafeSysctls,
		rootDir:                   cfg.RootDir,
		clusterDomain:             cfg.ClusterDomain,
		podLogsDir:                filepath.Join(cfg.RootDir, "pods"),
		nodeIP:                    cfg.NodeIP,
		nodeLabels:                maps.Clone(cfg.NodeLabels),
		syncFrequency:             cfg.SyncFrequency,
		nodeStatusUpdateFrequency: cfg.NodeStatusUpdateFrequency,
		healthzAddr:               cfg.HealthzAddr,
		podCIDRFallback:           cfg.PodCIDR,
		cgroupDriver:              cfg.CgroupDriver,
		serverListener:            serverListener,
		serverTLS:                 cfg.ServerTLS,
		logger:                    logger,
		conn:                      conn,
		podCache:                  container.NewCache(),
		podManager:                kubepod.NewManager(),
		workQueue:                 podworkers.NewWorkQueue(nil),
		reasonCache:               NewReasonCache(),
		runtimeState:              &runtimeState{},
		crashLoopBackOff:          flowcontrol.NewBackOff(backOffPeriod, maxContainerBackOff),
		nodeStatusUpdateCh:        make(chan struct{}, 1),
		livenessManager:           proberesults.NewManager(),
		configMapManager:          manager.NewConfigMapManager(cfg.Client),
		secretManager:             manager.NewSecretManager(cfg.Client),
		readinessManager:          proberesults.NewManager(),
		startupManager:            proberesults.NewManager(),
	}
	kl.recorder = cfg.Recorder
	if kl.recorder == nil {
		kl.recorder = eventrecorder.Nop{}
	}
	kl.tracer = tracing.Tracer(cfg.TracerProvider, "skiff.dev/services/kubelet")
	machine := nodestatus.ReadMachine(cfg.RootDir)
	kl.nodeAllocatable = machine.Capacity(cfg.Capacity)
	kl.tokenManager = token.NewManager(cfg.Client)
	kl.volumeManager, err = volumemanager.New(volumemanager.Config{
		PodsDir:         kl.podLogsDir,
		Client:          cfg.Client,
		Tokens:          kl.tokenManager,
		Objects:         kl,
		NodeAllocatable: kl.nodeAllocatable,
		Recorder:        kl.recorder,
		Logger:          logger,
		Mounter:         cfg.VolumeMounter,
	})
	if err != nil {
		closeRuntime(conn)
		return nil, fmt.Errorf("kubelet: %w", err)
	}
	kl.containerRuntime = kuberuntime.NewManager(conn, kuberuntime.Options{
		PodLogsDirectory: kl.podLogsDir,
		Logger:           logger,
		Recorder:         cfg.Recorder,
		LivenessManager:  kl.livenessManager,
		StartupManager:   kl.startupManager,
		KubeletVersion:   KubeletVersion,
		PullSecrets:      kl.getPullSecretsForPod,
		PodDNS: (&dns.Configurer{
			ClusterDNS: cfg.ClusterDNS, ClusterDomain: cfg.ClusterDomain, ResolverConfig: cfg.ResolverConfig,
		}).GetPodDNS,

		RuntimeHelper:       kl,
		RuntimeClassManager: runtimeclass.NewManager(cfg.Client),
		MemoryCapacity:      machine.MemoryCapacity,
	})
	kl.containerLogManager, err = logs.NewContainerLogManager(runtimeapi.NewRuntimeServiceClient(conn), logs.Config{
		MaxSize: cfg.ContainerLogMaxSize, MaxFiles: cfg.ContainerLogMaxFiles, Logger: logger,
	})
	if err != nil {
		closeRuntime(conn)
		if serverListener != nil {
			serverListener.Close()
		}
		return nil, fmt.Errorf("kubelet: %w", err)
	}
	genericPLEG := pleg.NewGenericPLEG(kl.containerRuntime, kl.podCache, pleg.RelistPeriod, logger)
	kl.pleg = genericPLEG
	if !cfg.GenericPLEG {
		kl.pleg = pleg.NewEventedPLEG(genericPLEG, runtimeapi.NewRuntimeServiceClient(conn), logger)
	}
	kl.runtimeState.addHealthCheck("PLEG", kl.pleg.Healthy)
	kl.statusManager = status.NewManager(cfg.Client, kl.podManager, kl, logger)
	kl.statusManager.Tracer = tracing.Tracer(cfg.TracerProvider, "skiff.dev/services/kubelet/status")
	kl.probeManager = prober.NewManager(prober.Options{
		StatusProvider:   kl.statusManager,
		LivenessManager:  kl.livenessManager,
		ReadinessManager: kl.readinessManager,
		StartupManager:   kl.startupManager,
		Runner:           kl.containerRuntime,
		Recorder:         cfg.Recorder,
		KubeletVersion:   KubeletVersion,
	})
	kl.podWorkers = podworkers.New(kl, kl.podCache, kl.pleg, kl.workQueue, cfg.SyncFrequency, backOffPeriod, logger)
	kl.podConfig = config.NewPodConfig(cfg.Client, cfg.NodeName, logger)
	// Every Service, for pods' service links, as kube's kubelet watches them.
	kl.services = informers.NewSharedInformerFactory(cfg.Client, 0)
	kl.serviceLister = kl.services.Core().V1().Services().Lister()
	kl.serviceHasSynced = kl.services.Core().V1().Services().Informer().HasSynced
	if cfg.PodManifestPath != "" {
		kl.podConfig.AddFileSource(cfg.PodManifestPath, cfg.FileCheckFrequency)
	}
	kl.mirrorPodClient = kubepod.NewMirrorClient(cfg.Client, cfg.NodeName)
	kl.nodeLeaseController = nodelease.NewController(cfg.Client, cfg.NodeName, cfg.LeaseDuration, cfg.LeaseDuration/4, logger)

	evictionHard := cfg.EvictionHard
	if evictionHard == nil {
		if evictionHard, err = eviction.ParseThresholds(eviction.DefaultEvictionHard); err != nil {
			return nil, fmt.Errorf("kubelet: %w", err)
		}
	}
	kl.evictionManager = eviction.NewManager(evictionHard, cfg.RootDir)
	kl.setNodeStatusFuncs = []nodestatus.Setter{
		nodestatus.NodeAddress(kl.nodeIP, kl.nodeName),
		nodestatus.MachineInfo(machine, kl.nodeAllocatable),
		nodestatus.VersionInfo(machine, KubeletVersion, kl.runtimeVersion),
		nodestatus.DaemonEndpoints(kubeletPort),
		nodestatus.GoRuntime(),
		nodestatus.MemoryPressureCondition(time.Now, kl.evictionManager.IsUnderMemoryPressure),
		nodestatus.DiskPressureCondition(time.Now, kl.evictionManager.IsUnderDiskPressure),
		nodestatus.PIDPressureCondition(time.Now, kl.evictionManager.IsUnderPIDPressure),
		// Ready last, after capacity, as in kubelet.
		nodestatus.ReadyCondition(time.Now, kl.readinessErrors),
	}
	return kl, nil
}

// ServerAddress is where the kubelet API listens (host:port, the real port
// when ServerAddr asked for :0), or "" when it serves none. A tunnel agent
// dials it (package tunnel).
func (kl *Kubelet) ServerAddress() string {
	if kl.serverListener == nil {
		return ""
	}
	return kl.serverListener.Addr().String()
}

// dialRuntime returns cfg.RuntimeConn, or a connection to cfg.RuntimeEndpoint.
func dialRuntime(cfg Config) (grpc.ClientConnInterface, error) {
	if cfg.RuntimeConn != nil {
		return cfg.RuntimeConn, nil
	}
	return kuberuntime.Dial(cfg.RuntimeEndpoint, tracing.GRPCClientOption(cfg.TracerProvider))
}

// closeRuntime closes conn if it can be closed.
func closeRuntime(conn grpc.ClientConnInterface) {
	if c, ok := conn.(io.Closer); ok {
		_ = c.Close()
	}
}

// Run starts every component, runs the sync loop until ctx ends, then stops
// the pod workers and the components, closes the runtime connection and
// returns. Containers keep running after Run returns; the next kubelet on
// the node adopts them. Run may be called once; it returns an error if the
// kubelet's directories cannot be created.
func (kl *Kubelet) Run(ctx context.Context) error {
	err := errors.New("kubelet: Run called twice")
	kl.runOnce.Do(func() { err = kl.run(ctx) })
	return err
}

func (kl *Kubelet) run(ctx context.Context) error {
	defer closeRuntime(kl.conn)
	defer kl.secretManager.Stop()
	defer kl.configMapManager.Stop()
	if err := os.MkdirAll(kl.podLogsDir, 0o755); err != nil {
		if kl.serverListener != nil {
			kl.serverListener.Close()
		}
		return fmt.Errorf("kubelet: create %s: %w", kl.podLogsDir, err)
	}
	kl.logger.Info("starting kubelet", "nodeIP", kl.nodeIP, "rootDir", kl.rootDir)
	// The configured range goes to the runtime before its first Status check, as kube's
	// NewMainKubelet hands over --pod-cidr; the Node's, once set, replaces it.
	kl.updatePodCIDR(ctx, "")

	var wg sync.WaitGroup
	start := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	start(kl.statusManager.Run)
	start(kl.probeManager.Run)
	start(kl.syncNodeStatusLoop)
	start(kl.nodeLeaseController.Run)
	start(kl.updateRuntimeUpLoop)
	start(kl.pleg.Run)
	start(kl.podConfig.Run)
	kl.services.Start(ctx.Done())
	defer kl.services.Shutdown()
	start(kl.containerLogManager.Run)

	start(kl.volumeManager.Run)
	start(func(ctx context.Context) {
		kl.evictionManager.Run(ctx, func(err error) { kl.logger.Error("observing node resources", "err", err) })
	})
	start(kl.tokenManager.Run)
	if kl.healthzAddr != "" {
		start(kl.serveHealthz)
	}
	if kl.serverListener != nil {
		start(kl.serveKubeletAPI)
	}

	kl.syncLoop(ctx, kl.podConfig.Updates(), kl)

	kl.podWorkers.Stop()
	wg.Wait()
	kl.logger.Info("kubelet stopped")
	return nil
}

// SyncHandler is what syncLoopIteration dispatches to; the Kubelet
// implements it. Mirrors kubelet's SyncHandler.
type SyncHandler interface {
	HandlePodAdditions(pods []*v1.Pod)
	HandlePodUpdates(pods []*v1.Pod)
	HandlePodRemoves(pods []*v1.Pod)
	HandlePodReconcile(pods []*v1.Pod)
	HandlePodSyncs(pods []*v1.Pod)
	HandlePodCleanups(ctx context.Context) error
}

// syncLoop runs syncLoopIteration until ctx ends, pausing (with backoff from
// 100 ms to 5 s) while the runtime is not usable: no pod is synced before the
// runtime answers and the PLEG has relisted it once. Mirrors
// Kubelet.syncLoop.
func (kl *Kubelet) syncLoop(ctx context.Context, updates <-chan config.PodUpdate, handler SyncHandler) {
	kl.logger.Info("starting kubelet main sync loop")
	syncTicker := time.NewTicker(time.Second)
	defer syncTicker.Stop()
	housekeepingTicker := time.NewTicker(housekeepingPeriod)
	defer housekeepingTicker.Stop()
	plegCh := kl.pleg.Watch()

	const base, maxWait = 100 * time.Millisecond, 5 * time.Second
	wait := base
	for ctx.Err() == nil {
		if err := kl.runtimeState.runtimeErrors(); err != nil {
			kl.logger.Debug("skipping pod synchronization", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, maxWait)
			continue
		}
		wait = base
		if !kl.syncLoopIteration(ctx, updates, handler, syncTicker.C, housekeepingTicker.C, plegCh) {
			return
		}
	}
}

// syncLoopIteration waits for one event and dispatches it:
//
//   - configCh: pod changes from the API server → HandlePodAdditions,
//     HandlePodUpdates (also for DELETE: graceful deletion is an update),
//     HandlePodRemoves, HandlePodReconcile;
//   - plegCh: a container of a pod started or died → HandlePodSyncs of it;
//   - syncCh (every second): pods whose worker asked for a resync (after
//     the resync interval, or a backoff) → HandlePodSyncs;
//   - housekeepingCh (every 2 s): once the pod source has synced,
//     HandlePodCleanups;
//   - the probe results managers: a failed liveness or startup probe →
//     HandlePodSyncs (which kills and restarts the container); a readiness
//     or startup result → statusManager.SetContainerReadiness or
//     SetContainerStartup at once, then HandlePodSyncs.
//
// It returns false when the loop should end. Mirrors
// Kubelet.syncLoopIteration.
func (kl *Kubelet) syncLoopIteration(ctx context.Context, configCh <-chan config.PodUpdate, handler SyncHandler,
	syncCh <-chan time.Time, housekeepingCh <-chan time.Time, plegCh <-chan *pleg.PodLifecycleEvent) bool {
	select {
	case <-ctx.Done():
		return false
	case u, open := <-configCh:
		if !open {
			kl.logger.Error("update channel is closed, exiting the sync loop")
			return false
		}
		kl.logger.Debug("SyncLoop config update", "op", u.Op.String(), "pods", podNames(u.Pods))
		switch u.Op {
		case config.ADD:
			handler.HandlePodAdditions(u.Pods)
		case config.UPDATE, config.DELETE:
			handler.HandlePodUpdates(u.Pods)
		case config.REMOVE:
			handler.HandlePodRemoves(u.Pods)
		case config.RECONCILE:
			handler.HandlePodReconcile(u.Pods)
		}
	case e := <-plegCh:
		if e.Type == pleg.ContainerDied {
			kl.containerGCDue = true // there is something to collect
		}
		if e.Type != pleg.ContainerRemoved {
			if pod, ok := kl.podManager.GetPodByUID(e.ID); ok {
				kl.logger.Debug("SyncLoop PLEG event", "pod", pod.Namespace+"/"+pod.Name, "event", e.Type, "container", e.Data)
				handler.HandlePodSyncs([]*v1.Pod{pod})
			}
		}
	case <-syncCh:
		if pods := kl.getPodsToSync(); len(pods) > 0 {
			handler.HandlePodSyncs(pods)
		}
	case <-housekeepingCh:
		if !kl.podConfig.SeenAllSources() {
			// Until the first list arrived, an unknown pod may just be one
			// we have not heard of yet: cleaning up would kill it.
			kl.logger.Debug("SyncLoop housekeeping skipped: sources aren't ready yet")
			break
		}
		if err := handler.HandlePodCleanups(ctx); err != nil && ctx.Err() == nil {
			kl.logger.Error("failed cleaning pods", "err", err)
		}
	case update := <-kl.livenessManager.Updates():
		if update.Result == proberesults.Failure {
			kl.handleProbeSync(update, handler, "liveness", "unhealthy")
		}
	case update := <-kl.readinessManager.Updates():
		ready := update.Result == proberesults.Success
		kl.statusManager.SetContainerReadiness(update.PodUID, update.ContainerID, ready)
		result := ""
		if ready {
			result = "ready"
		}
		kl.handleProbeSync(update, handler, "readiness", result)
	case update := <-kl.startupManager.Updates():
		started := update.Result == proberesults.Success
		kl.statusManager.SetContainerStartup(update.PodUID, update.ContainerID, started)
		result := "unhealthy"
		if started {
			result = "started"
		}
		kl.handleProbeSync(update, handler, "startup", result)
	}
	return true
}

// handleProbeSync syncs the pod a probe result is about. Mirrors kubelet's
// handleProbeSync.
func (kl *Kubelet) handleProbeSync(update proberesults.Update, handler SyncHandler, probe, result string) {
	pod, ok := kl.podManager.GetPodByUID(update.PodUID)
	if !ok {
		return
	}
	kl.logger.Debug("SyncLoop (probe)", "probe", probe, "status", result, "pod", pod.Namespace+"/"+pod.Name)
	handler.HandlePodSyncs([]*v1.Pod{pod})
}

func podNames(pods []*v1.Pod) []string {
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Namespace + "/" + p.Name
	}
	return names
}

// getPodsToSync returns the desired pods whose workers asked for a resync, and
// those past their activeDeadlineSeconds and not yet terminal, so that the
// deadline fails them within a second (kube's activeDeadlineHandler.ShouldSync).
func (kl *Kubelet) getPodsToSync() []*v1.Pod {
	var pods []*v1.Pod
	queued := map[types.UID]bool{}
	for _, uid := range kl.workQueue.GetWork() {
		if pod, ok := kl.podManager.GetPodByUID(uid); ok {
			pods = append(pods, pod)
			queued[uid] = true
		}
	}
	now := time.Now()
	for _, pod := range kl.podManager.GetPods() {
		if queued[pod.UID] || pod.Spec.ActiveDeadlineSeconds == nil {
			continue
		}
		if s, ok := kl.statusManager.GetPodStatus(pod.UID); ok && (s.Phase == v1.PodFailed || s.Phase == v1.PodSucceeded) {
			continue
		}
		if pastActiveDeadline(pod, kl.podStartTime(pod), now) {
			pods = append(pods, pod)
		}
	}
	return pods
}

// HandlePodAdditions records new pods as desired and starts their workers,
// oldest first; a pod whose sysctls this node does not allow (SysctlForbidden), or
// whose host ports an active pod holds (NodePorts), is rejected (Failed) instead. Mirrors Kubelet.HandlePodAdditions (without resource
// admission: the scheduler's fit is trusted).
func (kl *Kubelet) HandlePodAdditions(pods []*v1.Pod) {
	start := time.Now()
	pods = slices.Clone(pods)
	slices.SortStableFunc(pods, func(a, b *v1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	for _, pod := range pods {
		kl.podManager.AddPod(pod)
		kl.registerPodObjects(pod)
		if kubetypes.IsMirrorPod(pod) {
			kl.handleMirrorPod(pod, start)
			continue
		}
		if s, ok := kl.statusManager.GetPodStatus(pod.UID); !ok || s.Phase != v1.PodFailed {
			if why := admitSysctls(pod, kl.allowedUnsafeSysctls); why != "" {
				kl.rejectPod(pod, reasonSysctlForbidden, why)
				continue
			}
			if why := admitHostPorts(pod, kl.activePods()); why != "" {
				kl.rejectPod(pod, reasonNodePorts, why)
				continue
			}
		}
		kl.podWorkers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: podworkers.SyncPodCreate, StartTime: start})
	}
}

// registerPodObjects has the object managers watch the ConfigMaps and Secrets pod
// uses. A pod that has ended is not registered again: SyncTerminatedPod releases its
// objects once its volumes are down, so no volume rewrite in between misses them.
// Mirrors the basic pod manager's RegisterPod calls.
func (kl *Kubelet) registerPodObjects(pod *v1.Pod) {
	if kubetypes.IsMirrorPod(pod) || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return
	}
	kl.configMapManager.RegisterPod(pod)
	kl.secretManager.RegisterPod(pod)
}

// unregisterPodObjects stops the watches no other pod needs of the objects pod uses.
func (kl *Kubelet) unregisterPodObjects(pod *v1.Pod) {
	kl.configMapManager.UnregisterPod(pod)
	kl.secretManager.UnregisterPod(pod)
}

// GetConfigMap returns a ConfigMap a pod uses from the kubelet's cache
// (volumemanager.ObjectGetter).
func (kl *Kubelet) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	return kl.configMapManager.Get(ctx, namespace, name)
}

// GetSecret returns a Secret a pod uses from the kubelet's cache
// (volumemanager.ObjectGetter).
func (kl *Kubelet) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	return kl.secretManager.Get(ctx, namespace, name)
}

// handleMirrorPod syncs the static pod a mirror pod stands for (the mirror
// was created, changed or deleted: SyncPod puts it right); a mirror pod is
// never run itself. Mirrors Kubelet.handleMirrorPod.
func (kl *Kubelet) handleMirrorPod(mirrorPod *v1.Pod, start time.Time) {
	if pod, ok := kl.podManager.GetPodByMirrorPod(mirrorPod); ok {
		kl.podWorkers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: podworkers.SyncPodUpdate, StartTime: start})
	}
}

// HandlePodUpdates records changed pods and hands them to their workers; a
// pod with a deletionTimestamp starts terminating there. Mirrors
// Kubelet.HandlePodUpdates.
func (kl *Kubelet) HandlePodUpdates(pods []*v1.Pod) {
	start := time.Now()
	for _, pod := range pods {
		kl.podManager.UpdatePod(pod)
		kl.registerPodObjects(pod)
		if kubetypes.IsMirrorPod(pod) {
			kl.handleMirrorPod(pod, start)
			continue
		}
		kl.podWorkers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: podworkers.SyncPodUpdate, StartTime: start})
	}
}

// HandlePodRemoves forgets pods gone from the API server and has their
// workers kill whatever still runs. Mirrors Kubelet.HandlePodRemoves.
func (kl *Kubelet) HandlePodRemoves(pods []*v1.Pod) {
	start := time.Now()
	for _, pod := range pods {
		kl.podManager.RemovePod(pod)
		kl.unregisterPodObjects(pod)
		if kubetypes.IsMirrorPod(pod) {
			// A deleted mirror pod is recreated; its static pod keeps running.
			kl.handleMirrorPod(pod, start)
			continue
		}
		kl.podWorkers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: podworkers.SyncPodKill, StartTime: start})
	}
}

// HandlePodReconcile records pods whose API status changed (usually the
// kubelet's own writes); the status manager compares against them. Mirrors
// Kubelet.HandlePodReconcile.
func (kl *Kubelet) HandlePodReconcile(pods []*v1.Pod) {
	for _, pod := range pods {
		kl.podManager.UpdatePod(pod)
		// A readiness gate's condition changed: Ready follows it.
		if !kubetypes.IsMirrorPod(pod) && status.NeedToReconcilePodReadiness(pod) {
			kl.HandlePodSyncs([]*v1.Pod{pod})
		}
	}
}

// HandlePodSyncs asks the workers of pods to sync them again. Mirrors
// Kubelet.HandlePodSyncs.
func (kl *Kubelet) HandlePodSyncs(pods []*v1.Pod) {
	start := time.Now()
	for _, pod := range pods {
		if kubetypes.IsMirrorPod(pod) {
			static, ok := kl.podManager.GetPodByMirrorPod(pod)
			if !ok {
				continue
			}
			pod = static
		}
		// The pod manager has the freshest copy (e.g. after RECONCILE).
		if latest, ok := kl.podManager.GetPodByUID(pod.UID); ok {
			pod = latest
		}
		kl.podWorkers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: podworkers.SyncPodSync, StartTime: start})
	}
}

// HandlePodCleanups is housekeeping: it ends the workers of pods no longer
// desired, forgets their statuses, kills pods only the runtime knows (left
// by a previous kubelet or force-deleted), and garbage-collects exited
// containers, sandboxes and log directories of pods that are gone. Mirrors
// Kubelet.HandlePodCleanups and the container GC, which kube runs every
// minute on its own: here it runs in housekeeping as soon as there may be
// something to collect (a container died or a pod's worker ended), and
// every minute otherwise, so a deleted pod's containers go within seconds
// and a node whose pods run undisturbed does not list its runtime for it.
func (kl *Kubelet) HandlePodCleanups(ctx context.Context) error {
	allPods := kl.podManager.GetPods()
	workingPods := kl.podWorkers.SyncKnownPods(allPods)
	for uid := range kl.workingPods {
		if _, ok := workingPods[uid]; !ok {
			kl.containerGCDue = true // a worker ended: its pod's content may go
			break
		}
	}
	kl.workingPods = workingPods

	desired := make(map[types.UID]bool, len(allPods))
	keep := make(map[types.UID]bool, len(allPods)+len(workingPods))
	for _, p := range allPods {
		desired[p.UID] = true
		keep[p.UID] = true
	}
	for uid := range workingPods {
		keep[uid] = true
	}
	kl.statusManager.RemoveOrphanedStatuses(keep)
	kl.probeManager.CleanupPods(desired)
	kl.deleteOrphanedMirrorPods(ctx, workingPods)
	kl.reasonCache.RemoveOrphans(keep)

	runningPods, err := kl.containerRuntime.GetPods(ctx, false)
	if err != nil {
		return fmt.Errorf("list running pods: %w", err)
	}
	for _, rp := range runningPods {
		if w, ok := workingPods[rp.ID]; ok && (w.State == podworkers.SyncPod || w.State == podworkers.TerminatingPod) {
			continue
		}
		if desired[rp.ID] {
			continue
		}
		kl.logger.Info("cleaning up orphaned pod containers", "pod", rp.Namespace+"/"+rp.Name, "podUID", rp.ID)
		one := int64(1)
		kl.podWorkers.UpdatePod(podworkers.UpdatePodOptions{
			UpdateType:     podworkers.SyncPodKill,
			RunningPod:     rp,
			KillPodOptions: &podworkers.KillPodOptions{PodTerminationGracePeriodSecondsOverride: &one},
		})
	}

	// Pods whose directories are left over (force-deleted, or from a
	// previous kubelet) but which nothing keeps: their volumes go.
	if err := kl.volumeManager.CleanupOrphanedPodDirs(keep); err != nil && ctx.Err() == nil {
		kl.logger.Error("failed cleaning up orphaned pod directories", "err", err)
	}

	if now := time.Now(); kl.containerGCDue || now.Sub(kl.lastContainerGC) >= containerGCPeriod {
		kl.containerGCDue, kl.lastContainerGC = false, now
		if err := kl.containerRuntime.GarbageCollect(ctx, kl.podWorkers, true); err != nil && ctx.Err() == nil {
			kl.logger.Error("container garbage collection failed", "err", err)
			kl.containerGCDue = true
		}
	}
	kl.crashLoopBackOff.GC()
	return nil
}

// deleteOrphanedMirrorPods deletes the mirror pods whose static pod is gone,
// once that static pod's worker has finished terminating it (the mirror's
// config.mirror annotation is the static pod's UID). Mirrors
// Kubelet.deleteOrphanedMirrorPods.
func (kl *Kubelet) deleteOrphanedMirrorPods(ctx context.Context, workingPods map[types.UID]podworkers.PodWorkerSync) {
	for _, mirror := range kl.podManager.GetOrphanedMirrorPods() {
		if w, ok := workingPods[types.UID(mirror.Annotations[kubetypes.ConfigMirrorAnnotationKey])]; ok && w.State != podworkers.TerminatedPod {
			continue
		}
		uid := mirror.UID
		if _, err := kl.mirrorPodClient.DeleteMirrorPod(ctx, mirror.Namespace, mirror.Name, &uid); err != nil && ctx.Err() == nil {
			kl.logger.Error("failed to delete orphaned mirror pod", "pod", mirror.Namespace+"/"+mirror.Name, "err", err)
		}
	}
}

// syncMirrorPod keeps a static pod's mirror pod current: one deleted (or
// being deleted) or of an older manifest is deleted and created again. A
// mirror is not created while the Node is missing or being deleted. Mirrors
// the mirror pod step of Kubelet.SyncPod.
func (kl *Kubelet) syncMirrorPod(ctx context.Context, pod *v1.Pod) {
	mirrorPod, hasMirror := kl.podManager.GetMirrorPodByPod(pod)
	deleted := false
	if hasMirror && (mirrorPod.DeletionTimestamp != nil || !kubetypes.IsMirrorPodOf(mirrorPod, pod)) {
		kl.logger.Info("deleting outdated mirror pod", "pod", pod.Namespace+"/"+pod.Name, "mirrorPodUID", mirrorPod.UID)
		uid := mirrorPod.UID
		var err error
		if deleted, err = kl.mirrorPodClient.DeleteMirrorPod(ctx, mirrorPod.Namespace, mirrorPod.Name, &uid); err != nil {
			kl.logger.Error("failed deleting mirror pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
	}
	if hasMirror && !deleted {
		return
	}
	node, err := kl.kubeClient.CoreV1().Nodes().Get(ctx, kl.nodeName, metav1.GetOptions{})
	if err != nil {
		kl.logger.Debug("no mirror pod created: cannot get the node", "err", err)
		return
	}
	if node.DeletionTimestamp != nil {
		return
	}
	if err := kl.mirrorPodClient.CreateMirrorPod(ctx, pod, node); err != nil && ctx.Err() == nil {
		kl.logger.Error("failed creating a mirror pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

// PodCouldHaveRunningContainers reports whether pod uid may still have
// running containers (the status manager's deletion safety check).
func (kl *Kubelet) PodCouldHaveRunningContainers(uid types.UID) bool {
	return kl.podWorkers.CouldHaveRunningContainers(uid)
}

// SyncPod reconciles one pod with the runtime: it computes and caches the
// pod's status (returning isTerminal=true, without touching the runtime, once
// the pod reached Succeeded or Failed), then lets the runtime manager create
// the sandbox and start containers as needed. Start failures are remembered
// so the status shows why (CrashLoopBackOff, CreateContainerError,
// ErrImagePull...); the returned error makes the worker retry after its
// backoff period. Mirrors Kubelet.SyncPod.
func (kl *Kubelet) SyncPod(ctx context.Context, updateType podworkers.SyncPodType, pod *v1.Pod, podStatus *container.PodStatus) (isTerminal bool, err error) {
	ctx, span := kl.startPodSpan(ctx, "SyncPod", pod, pod.Status.Phase == "" || pod.Status.Phase == v1.PodPending)
	defer func() {
		if err != nil && !errors.Is(err, container.ErrCrashLoopBackOff) && !errors.Is(err, container.ErrImagePullBackOff) {
			tracing.RecordError(span, err)
		}
		span.End()
	}()
	apiPodStatus := kl.generateAPIPodStatus(pod, podStatus, false)
	if apiPodStatus.Phase == v1.PodSucceeded || apiPodStatus.Phase == v1.PodFailed {
		kl.statusManager.SetPodStatus(pod, apiPodStatus)
		return true, nil
	}
	kl.statusManager.SetPodStatus(pod, apiPodStatus)
	kl.probeManager.AddPod(pod)
	if kubetypes.IsStaticPod(pod) {
		kl.syncMirrorPod(ctx, pod)
	}

	if err := kl.runtimeState.networkErrors(); err != nil && !container.IsHostNetworkPod(pod) {
		return false, fmt.Errorf("network is not ready: %w", err)
	}

	// Volumes are ready before the sandbox and the containers are created.
	if err := kl.volumeManager.WaitForAttachAndMount(ctx, pod); err != nil {
		if ctx.Err() == nil {
			kl.recorder.Eventf(pod, v1.EventTypeWarning, volumemanager.FailedMountVolume, "Unable to attach or mount volumes: %v", err)
		}
		return false, err
	}

	// The cached status is shared; the runtime manager gets its own copy
	// with the IPs the API status settled on (host IP for host network).
	ps := *podStatus
	ps.IPs = nil
	for _, ip := range apiPodStatus.PodIPs {
		ps.IPs = append(ps.IPs, ip.IP)
	}

	result := kl.containerRuntime.SyncPod(ctx, pod, &ps, kl.crashLoopBackOff)
	kl.reasonCache.Update(pod.UID, result)
	if err := result.Error(); err != nil {
		// Show the failure now rather than at the next sync.
		kl.statusManager.SetPodStatus(pod, kl.generateAPIPodStatus(pod, podStatus, false))
		return false, syncError(result)
	}
	return false, nil
}

// syncError summarises a failed SyncPod; when every failure is a backoff,
// the error is the backoff itself, which the pod workers retry quietly.
func syncError(result container.PodSyncResult) error {
	onlyBackOff := result.SyncError == nil
	for _, r := range result.SyncResults {
		if r.Error != nil && !errors.Is(r.Error, container.ErrCrashLoopBackOff) && !errors.Is(r.Error, container.ErrImagePullBackOff) {
			onlyBackOff = false
		}
	}
	if onlyBackOff {
		for _, r := range result.SyncResults {
			if r.Error != nil {
				return fmt.Errorf("%w: %s", r.Error, r.Message)
			}
		}
	}
	return result.Error()
}

// SyncTerminatingPod stops every container of pod (with gracePeriod seconds,
// or the pod's own) and its sandbox, checks that nothing runs any more, and
// caches the pod's final status (terminal phase). The status manager holds
// the terminal phase back from the API until the worker completes. Mirrors
// Kubelet.SyncTerminatingPod.
func (kl *Kubelet) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, podStatus *container.PodStatus, gracePeriod *int64) (err error) {
	ctx, span := kl.startPodSpan(ctx, "SyncTerminatingPod", pod, false)
	defer func() {
		tracing.RecordError(span, err)
		span.End()
	}()
	kl.logger.Info("terminating pod", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "gracePeriod", ptrValue(gracePeriod))
	kl.statusManager.SetPodStatus(pod, kl.generateAPIPodStatus(pod, podStatus, false))

	// A terminating pod is not restarted for its probes; readiness keeps
	// reporting until the containers are gone.
	kl.probeManager.StopLivenessAndStartup(pod)
	running := container.ConvertPodStatusToRunningPod(kl.containerRuntime.Type(), podStatus)
	if err := kl.containerRuntime.KillPod(ctx, pod, running, gracePeriod); err != nil {
		return fmt.Errorf("kill pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	kl.probeManager.RemovePod(pod)
	stopped, err := kl.containerRuntime.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return fmt.Errorf("read pod status after termination: %w", err)
	}
	if len(stopped.IPs) == 0 {
		// The stopped sandbox has no IP any more; the API keeps the last.
		stopped.IPs = podStatus.IPs
	}
	var stillRunning []string
	for _, s := range stopped.ContainerStatuses {
		if s.State == container.ContainerStateRunning {
			stillRunning = append(stillRunning, s.ID.String())
		}
	}
	if len(stillRunning) > 0 {
		// Started after our view was taken, or the runtime misbehaved:
		// retry with a fresh view.
		return fmt.Errorf("detected running containers after a successful KillPod: %v", stillRunning)
	}
	kl.statusManager.SetPodStatus(pod, kl.generateAPIPodStatus(pod, stopped, true))
	return nil
}

// SyncTerminatingRuntimePod stops a pod only the runtime knows, with a 1 s
// grace period: there is no spec to take one from. Mirrors
// Kubelet.SyncTerminatingRuntimePod.
func (kl *Kubelet) SyncTerminatingRuntimePod(ctx context.Context, runningPod *container.Pod) error {
	one := int64(1)
	if err := kl.containerRuntime.KillPod(ctx, nil, *runningPod, &one); err != nil {
		return fmt.Errorf("kill orphaned pod %s/%s: %w", runningPod.Namespace, runningPod.Name, err)
	}
	return nil
}

// SyncTerminatedPod records the pod's final status and tells the status
// manager the pod is finished, which lets it remove a deleted pod from the
// API server. Mirrors Kubelet.SyncTerminatedPod.
func (kl *Kubelet) SyncTerminatedPod(ctx context.Context, pod *v1.Pod, podStatus *container.PodStatus) error {
	kl.statusManager.SetPodStatus(pod, kl.generateAPIPodStatus(pod, podStatus, true))
	// Every container has stopped: the volumes can go.
	if err := kl.volumeManager.WaitForUnmount(ctx, pod); err != nil {
		return fmt.Errorf("unmount volumes of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	kl.unregisterPodObjects(pod) // no volume of it is rewritten any more
	kl.statusManager.TerminatePod(pod)
	kl.logger.Info("pod terminated", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID)
	return nil
}

func ptrValue(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// runtimeVersion returns "<runtimeName>://<version>" for the node status.
func (kl *Kubelet) runtimeVersion(ctx context.Context) (string, error) {
	v, err := kl.containerRuntime.Version(ctx)
	if err != nil {
		return "", err
	}
	return v.GetRuntimeName() + "://" + v.GetRuntimeVersion(), nil
}

// readinessErrors is why the node is not Ready: runtime or PLEG problems,
// or pod networking not ready.
func (kl *Kubelet) readinessErrors() error {
	return errors.Join(kl.runtimeState.runtimeErrors(), kl.runtimeState.networkErrors())
}

// updateRuntimeUpLoop checks the runtime's Status every 5 s (the first time
// at once; every 0.5 s while it or its network is not ready), asks for a node
// status update whenever readiness changes, and requeues every pod when the
// network becomes ready. While the network is not ready and the runtime has no
// pod range, it also reads the Node for one (pollPodCIDR).
// Mirrors Kubelet.updateRuntimeUp.
func (kl *Kubelet) updateRuntimeUpLoop(ctx context.Context) {
	lastReady, lastNetworkReady := false, false
	for {
		kl.updateRuntimeUp(ctx)
		if kl.runtimeState.networkErrors() != nil && !kl.hasPodCIDR() && kl.pollPodCIDR(ctx) {
			kl.updateRuntimeUp(ctx)
		}
		ready := kl.readinessErrors() == nil
		if ready != lastReady {
			lastReady = ready
			select {
			case kl.nodeStatusUpdateCh <- struct{}{}:
			default:
			}
		}
		// Pods whose sync failed on "network is not ready" wait out the pod
		// worker's back-off (10 s); once the network is ready they go now.
		networkReady := kl.runtimeState.networkErrors() == nil
		if networkReady && !lastNetworkReady {
			kl.requeueAllPods()
		}
		lastNetworkReady = networkReady
		period := runtimeUpPeriod
		if !ready {
			period = runtimeNotReadyPeriod
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}

// requeueAllPods asks every desired pod's worker to sync at the next sync tick.
func (kl *Kubelet) requeueAllPods() {
	for _, pod := range kl.podManager.GetPods() {
		kl.workQueue.Enqueue(pod.UID, 0)
	}
}

func (kl *Kubelet) updateRuntimeUp(ctx context.Context) {
	s, err := kl.containerRuntime.Status(ctx)
	if err != nil {
		if ctx.Err() == nil {
			kl.logger.Debug("container runtime status check failed", "err", err)
		}
		return
	}
	var runtimeReady, networkReady bool
	var runtimeCond, networkCond string
	networkSeen := false
	for _, c := range s.GetConditions() {
		switch c.GetType() {
		case "RuntimeReady":
			runtimeReady = c.GetStatus()
			runtimeCond = fmt.Sprintf("RuntimeReady=%v reason:%s message:%s", c.GetStatus(), c.GetReason(), c.GetMessage())
		case "NetworkReady":
			networkSeen = true
			networkReady = c.GetStatus()
			networkCond = fmt.Sprintf("NetworkReady=%v reason:%s message:%s", c.GetStatus(), c.GetReason(), c.GetMessage())
		}
	}
	// A runtime that does not report NetworkReady (skiff's built-in ones
	// may not) is taken to need no pod network setup.
	if networkSeen && !networkReady {
		kl.runtimeState.setNetworkState(fmt.Errorf("container runtime network not ready: %s", networkCond))
	} else {
		kl.runtimeState.setNetworkState(nil)
	}
	if !runtimeReady {
		if runtimeCond == "" {
			runtimeCond = "RuntimeReady condition not reported"
		}
		kl.runtimeState.setRuntimeState(fmt.Errorf("container runtime not ready: %s", runtimeCond))
		return
	}
	if err := kl.resolveCgroupDriver(ctx); err != nil {
		kl.runtimeState.setRuntimeState(fmt.Errorf("the cgroup driver: %w", err))
		return
	}
	kl.runtimeState.setRuntimeState(nil)
	kl.runtimeState.setRuntimeSync(time.Now())
}

// resolveCgroupDriver asks the runtime for its cgroup driver once (CRI
// RuntimeConfig; Unimplemented keeps Config.CgroupDriver), as kube's kubelet
// does at start; skiff asks when the runtime first answers Status, so a
// kubelet started before its runtime waits for it rather than exit.
func (kl *Kubelet) resolveCgroupDriver(ctx context.Context) error {
	kl.cgroupDriverMu.Lock()
	defer kl.cgroupDriverMu.Unlock()
	if kl.cgroupDriverResolved {
		return nil
	}
	driver, err := cm.CgroupDriverFromCRI(ctx, runtimeapi.NewRuntimeServiceClient(kl.conn), kl.cgroupDriver, kl.logger)
	if err != nil {
		return err
	}
	kl.cgroupDriver, kl.cgroupDriverResolved = driver, true
	kl.logger.Info("cgroup driver", "cgroupDriver", driver)
	return nil
}

// podCgroupDriver is the driver pods' cgroups are named with.
func (kl *Kubelet) podCgroupDriver() cm.CgroupDriver {
	kl.cgroupDriverMu.Lock()
	defer kl.cgroupDriverMu.Unlock()
	return kl.cgroupDriver
}

// Healthz is nil while the kubelet is healthy: its PLEG relists in time (kube's
// kubelet healthz checks "syncloop" and "pleg"). Fit for serving.WithLiveness.
func (kl *Kubelet) Healthz() error {
	if ok, err := kl.pleg.Healthy(); !ok {
		if err == nil {
			err = errors.New("not healthy")
		}
		return fmt.Errorf("pleg: %w", err)
	}
	return nil
}

// serveHealthz serves serving's /healthz, /livez and /readyz, failing while Healthz
// does, on healthzAddr until ctx ends.
func (kl *Kubelet) serveHealthz(ctx context.Context) {
	l, err := net.Listen("tcp", kl.healthzAddr)
	if err == nil {
		err = serving.Serve(ctx, l, nil, nil, serving.WithLiveness(kl.Healthz))
	}
	if err != nil {
		kl.logger.Error("healthz server failed", "addr", kl.healthzAddr, "err", err)
	}
}
