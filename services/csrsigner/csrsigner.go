// Package csrsigner is skiff's csr-signer: it watches CertificateSigningRequests,
// auto-approves the kubelet client requests Kubernetes' csrapproving controller would
// and, when told to, kubelet serving requests for a node's own addresses (see Approver),
// and issues certificates with the cluster CA for approved requests of the
// signers it owns (see Signer). It mirrors kube-controller-manager's csrapproving and
// csrsigning controllers (k8s.io/kubernetes/pkg/controller/certificates), run as one
// service with its own identity, system:skiff:csr-signer.
package csrsigner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certificateslisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"skiff.dev/services/internal/eventrecorder"
	"skiff.dev/services/internal/pki"
)

// Config is what the csr-signer needs.
type Config struct {
	// Client reaches the apiserver as system:skiff:csr-signer.
	Client kubernetes.Interface
	// CA is the cluster CA that signs (pki.LoadCA).
	CA *pki.CA
	// AutoApprove turns the Approver on; false leaves every request to a person.
	AutoApprove bool
	// ApproveKubeletServing lets the Approver approve kubernetes.io/kubelet-serving
	// requests for the node's own addresses, within a ServingPolicy built from
	// ServiceClusterIPRange, ControlPlaneHosts and Resolver; false leaves them to a
	// person, as kube-controller-manager does. It needs AutoApprove.
	ApproveKubeletServing bool
	// ServiceClusterIPRange is the Services' cluster IP range, none of whose IPs is
	// approved in a serving certificate; the zero Prefix means
	// DefaultServiceClusterIPRange.
	ServiceClusterIPRange netip.Prefix
	// ControlPlaneHosts are DNS names and IPs of the control plane never approved in a
	// serving certificate, besides DefaultControlPlaneHosts().
	ControlPlaneHosts []string
	// Resolver resolves the control-plane host names; nil means net.DefaultResolver.
	Resolver Resolver
	// MaxDuration caps issued lifetimes; 0 means DefaultMaxDuration (1 year).
	MaxDuration time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Recorder reports events on the requests (Approved, WaitingForApproval with the
	// reason a request is left for a person, Issued, SignerValidationFailure); nil
	// records none.
	Recorder record.EventRecorder
}

// Controller approves and signs CertificateSigningRequests.
type Controller struct {
	client      kubernetes.Interface
	autoApprove bool
	approver    Approver
	signer      *Signer
	logger      *slog.Logger
	factory     informers.SharedInformerFactory
	csrs        certificateslisters.CertificateSigningRequestLister
	synced      []cache.InformerSynced
	queue       workqueue.TypedRateLimitingInterface[string]
	metrics     *metrics
	recorder    record.EventRecorder
	running     atomic.Bool
}

// New builds a Controller; Run starts it. Errors: a missing Client or CA.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.CA == nil {
		return nil, errors.New("csrsigner: Config.Client and Config.CA are required")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	factory := informers.NewSharedInformerFactory(cfg.Client, 0)
	csrInformer := factory.Certificates().V1().CertificateSigningRequests()
	nodeInformer := factory.Core().V1().Nodes()
	c := &Controller{
		client:      cfg.Client,
		autoApprove: cfg.AutoApprove,
		approver:    Approver{Nodes: nodeInformer.Lister()},
		signer:      &Signer{CA: cfg.CA, MaxDuration: cfg.MaxDuration},
		logger:      logger.With("component", "csr-signer"),
		factory:     factory,
		csrs:        csrInformer.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csr-signer"}),
		metrics:  newMetrics(),
		recorder: cfg.Recorder,
	}
	if c.recorder == nil {
		c.recorder = eventrecorder.Nop{}
	}
	if cfg.ApproveKubeletServing {
		serviceCIDR := cfg.ServiceClusterIPRange
		if !serviceCIDR.IsValid() {
			serviceCIDR = DefaultServiceClusterIPRange
		}
		c.approver.KubeletServing = &ServingPolicy{
			ServiceCIDR:       serviceCIDR.Masked(),
			ControlPlaneHosts: append(DefaultControlPlaneHosts(), cfg.ControlPlaneHosts...),
			Resolver:          cfg.Resolver,
		}
	}
	enqueue := func(obj any) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
			c.queue.Add(csr.Name)
		}
	}
	if _, err := csrInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, err
	}
	// A kubelet-serving request may wait for its Node to exist or to report the
	// addresses it names, or for another Node to stop reporting them: look at the
	// pending ones again when a Node appears, goes or changes its addresses (not at
	// every status heartbeat).
	nodeChanged := func(any) { c.enqueuePendingServing() }
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: nodeChanged,
		UpdateFunc: func(old, obj any) {
			oldNode, ok1 := old.(*corev1.Node)
			node, ok2 := obj.(*corev1.Node)
			if ok1 && ok2 && equality.Semantic.DeepEqual(oldNode.Status.Addresses, node.Status.Addresses) {
				return
			}
			nodeChanged(obj)
		},
		DeleteFunc: nodeChanged,
	}); err != nil {
		return nil, err
	}
	c.synced = []cache.InformerSynced{csrInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced}
	return c, nil
}

// Metrics is the csr-signer's Prometheus collector.
func (c *Controller) Metrics() prometheus.Collector { return c.metrics }

// Ready reports nil once the informers have synced and the workers run.
func (c *Controller) Ready() error {
	if !c.running.Load() {
		return errors.New("csr-signer: informers not synced yet")
	}
	return nil
}

// Run watches requests and handles them with one worker until ctx ends. The informers
// reconnect to the apiserver with backoff; a failed handling is retried with the
// workqueue's exponential backoff (5 ms to 1000 s).
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return ctx.Err()
	}
	c.running.Store(true)
	defer c.running.Store(false)
	c.logger.Info("csr-signer running", "autoApprove", c.autoApprove, "approveKubeletServing", c.approver.KubeletServing != nil,
		"maxDuration", c.signer.Duration(nil).String())
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.processNextItem(ctx) {
	}
	return nil
}

func (c *Controller) processNextItem(ctx context.Context) bool {
	name, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(name)
	if err := c.sync(ctx, name); err != nil {
		c.metrics.syncErrors.Inc()
		c.logger.Warn("handling certificate signing request; will retry", "csr", name, "err", err)
		c.queue.AddRateLimited(name)
		return true
	}
	c.queue.Forget(name)
	return true
}

// enqueuePendingServing queues every pending kubelet-serving request.
func (c *Controller) enqueuePendingServing() {
	csrs, err := c.csrs.List(labelsEverything)
	if err != nil {
		return
	}
	for _, csr := range csrs {
		if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && isPending(csr) {
			c.queue.Add(csr.Name)
		}
	}
}

// sync handles one request: approve it if it is pending and the Approver says so, sign
// it if it is approved, of an owned signer, and has neither a certificate nor a Failed
// condition.
func (c *Controller) sync(ctx context.Context, name string) error {
	cached, err := c.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	csr := cached.DeepCopy()
	if isPending(csr) {
		return c.approve(ctx, csr)
	}
	if !hasCondition(csr, certificatesv1.CertificateApproved) || hasCondition(csr, certificatesv1.CertificateFailed) ||
		len(csr.Status.Certificate) > 0 || !SignedBy.Has(csr.Spec.SignerName) {
		return nil
	}
	return c.sign(ctx, csr)
}

func (c *Controller) approve(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) error {
	if !c.autoApprove {
		return nil
	}
	d, err := c.approver.Decide(ctx, csr)
	if err != nil {
		return fmt.Errorf("decide: %w", err)
	}
	if !d.Approve {
		c.metrics.leftPending.WithLabelValues(csr.Spec.SignerName).Inc()
		c.logger.Info("certificate signing request left for a person", "csr", csr.Name, "signer", csr.Spec.SignerName, "requester", csr.Spec.Username, "why", d.Message)
		c.recorder.Event(csr, corev1.EventTypeNormal, "WaitingForApproval", d.Message)
		return nil
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
		Reason: d.Reason, Message: d.Message, LastUpdateTime: metav1.Now(),
	})
	if _, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("approve: %w", err)
	}
	c.metrics.approved.WithLabelValues(csr.Spec.SignerName).Inc()
	c.recorder.Event(csr, corev1.EventTypeNormal, "Approved", d.Message)
	c.logger.Info("certificate signing request approved", "csr", csr.Name, "signer", csr.Spec.SignerName, "requester", csr.Spec.Username)
	return nil
}

func (c *Controller) sign(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) error {
	cert, err := c.signer.Sign(csr)
	var invalid *ValidationError
	switch {
	case errors.As(err, &invalid):
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateFailed, Status: corev1.ConditionTrue,
			Reason: "SignerValidationFailure", Message: invalid.Error(), LastUpdateTime: metav1.Now(),
		})
		c.metrics.failed.WithLabelValues(csr.Spec.SignerName, "SignerValidationFailure").Inc()
		c.logger.Info("certificate signing request failed validation", "csr", csr.Name, "signer", csr.Spec.SignerName, "err", invalid)
		c.recorder.Event(csr, corev1.EventTypeWarning, "SignerValidationFailure", invalid.Error())
	case err != nil:
		return err
	default:
		csr.Status.Certificate = cert
	}
	if _, err := c.client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	if len(cert) > 0 {
		c.metrics.signed.WithLabelValues(csr.Spec.SignerName).Inc()
		c.logger.Info("certificate issued", "csr", csr.Name, "signer", csr.Spec.SignerName, "subject", subjectOf(csr))
		c.recorder.Eventf(csr, corev1.EventTypeNormal, "Issued", "Certificate issued for %s by %s", subjectOf(csr), csr.Spec.SignerName)
	}
	return nil
}

// isPending reports whether a request is neither approved nor denied.
func isPending(csr *certificatesv1.CertificateSigningRequest) bool {
	return !hasCondition(csr, certificatesv1.CertificateApproved) && !hasCondition(csr, certificatesv1.CertificateDenied)
}

func hasCondition(csr *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func subjectOf(csr *certificatesv1.CertificateSigningRequest) string {
	req, err := parseCSR(csr.Spec.Request)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(req.Subject.String())
}
