package registry

import (
	"context"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Strategy is everything that differs between resources on the generic Store's paths.
// It folds kube's RESTCreateStrategy, RESTUpdateStrategy and the field-selector
// attribute function into one interface (k8s.io/apiserver/pkg/registry/rest/create.go,
// update.go). Tables and graceful deletion are optional: see TablePrinter and
// GracefulDeleteStrategy.
type Strategy interface {
	// NamespaceScoped is true for namespaced resources (pods), false for cluster-scoped
	// ones (nodes, namespaces).
	NamespaceScoped() bool
	// PrepareForCreate clears what a client may not set on create (for most resources:
	// status) and fills defaults. It runs before Validate.
	PrepareForCreate(ctx context.Context, obj runtime.Object)
	// PrepareForUpdate copies from old what this endpoint may not change: the main
	// resource keeps the old status, a status subresource keeps the old spec.
	PrepareForUpdate(ctx context.Context, obj, old runtime.Object)
	// Validate checks a new object; an empty list means valid.
	Validate(ctx context.Context, obj runtime.Object) field.ErrorList
	// ValidateUpdate checks an update against the stored object.
	ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList
	// GetAttrs returns the object's labels and its selectable fields. The keys of the
	// fields set returned for an empty object are the field labels the resource supports
	// in fieldSelector, so the two can never disagree.
	GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error)
}

// GracefulDeleteStrategy is implemented by strategies whose objects are deleted in two
// steps (pods): first marked with deletionTimestamp, then removed by their owner.
// Mirrors rest.RESTGracefulDeleteStrategy.
type GracefulDeleteStrategy interface {
	// CheckGracefulDelete may change options.GracePeriodSeconds and reports whether the
	// delete is graceful (the object stays, marked, when the grace period is > 0).
	CheckGracefulDelete(ctx context.Context, obj runtime.Object, options *metav1.DeleteOptions) bool
}

// TablePrinter is implemented by strategies that print kubectl columns; resources
// without it get NAME and CREATED AT, as kube-apiserver's default table convertor does.
// Mirrors kube's printers: one column set and one row function per kind.
type TablePrinter interface {
	// TableColumns lists every column, the wide ones with Priority 1.
	TableColumns() []metav1.TableColumnDefinition
	// TableRow returns the cells of one object, one per column.
	TableRow(obj runtime.Object) []interface{}
}

// IndexedStrategy is implemented by strategies whose objects a watch cache should index
// by field (pods by spec.nodeName), so a watcher selecting one value pays only for the
// objects carrying it. Mirrors the cacher's IndexerFuncs.
type IndexedStrategy interface {
	// IndexFields names the indexed fields, each a key of GetAttrs' field set.
	IndexFields() []string
}

// TTLStrategy is implemented by strategies whose objects expire: etcd deletes each
// object TTL after its last write (through an etcd lease). Mirrors the generic Store's
// TTLFunc, which kube-apiserver sets for events from --event-ttl.
type TTLStrategy interface {
	// TTL is how long an object lives after its last write.
	TTL() time.Duration
}

// ResetFieldsStrategy is implemented by strategies that reset fields a client sets: the
// main resource keeps the stored status, a status subresource the stored spec. Server-side
// apply must not record a manager as owning them. Mirrors rest.ResetFieldsStrategy.
type ResetFieldsStrategy interface {
	// GetResetFields lists, per API version, the fields PrepareForCreate and
	// PrepareForUpdate reset.
	GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set
}

// DeleteDuringUpdateStrategy is implemented by strategies whose objects hold more than
// metadata.finalizers before an update may finish their delete (a namespace keeps its
// spec.finalizers). Without it, an update that leaves an object being deleted with no
// finalizers removes it. Mirrors the generic Store's ShouldDeleteDuringUpdate.
type DeleteDuringUpdateStrategy interface {
	// ShouldDeleteDuringUpdate reports whether obj, just written by an update, should
	// now be removed.
	ShouldDeleteDuringUpdate(obj runtime.Object) bool
}

// OrphanByDefaultStrategy is implemented by strategies whose objects' dependents are
// orphaned, not deleted, when a delete names no propagation policy and the object carries
// no deletion finalizer: core/v1 ReplicationControllers, for compatibility with clients
// older than the garbage collector. Mirrors rest.GarbageCollectionDeleteStrategy
// returning OrphanDependents.
type OrphanByDefaultStrategy interface {
	// OrphanDependentsByDefault reports whether a delete without a policy orphans.
	OrphanDependentsByDefault() bool
}

// UnconditionalUpdateStrategy is implemented by strategies that decide whether an update
// naming no resourceVersion applies to whatever is stored (the Store's default, kube's
// for most built-in resources) or is refused, so that every writer proves it read the
// object it replaces. Mirrors rest.RESTUpdateStrategy's AllowUnconditionalUpdate.
type UnconditionalUpdateStrategy interface {
	// AllowUnconditionalUpdate reports whether an update without a resourceVersion is
	// accepted.
	AllowUnconditionalUpdate() bool
}
