// Package etcd3 implements storage.Interface on etcd v3 (go.etcd.io/etcd/client/v3). It
// mirrors k8s.io/apiserver/pkg/storage/etcd3 (store.go, watcher.go): objects are stored
// encoded with the resource's codec under the full key the registry gives, the
// resourceVersion is never stored but always set from the etcd ModRevision, writes are
// transactions guarded by CreateRevision/ModRevision, and watches translate etcd events
// into watch.Added/Modified/Deleted events filtered by a SelectionPredicate.
//
// Besides *storage.StorageError, the methods return these errors the registry must map
// (test with errors.Is):
//
//	storage.ErrInvalidResourceVersion  400 Bad Request (malformed resourceVersion)
//	storage.ErrInvalidContinue         400 Bad Request (malformed continue token, or one
//	                                   combined with a resourceVersion)
//	storage.ErrResourceVersionTooLarge 504 Timeout, as Kubernetes' "Too large resource
//	                                   version" (get or list at a future
//	                                   revision; a WatchList gets it as an ERROR
//	                                   event)
//	ErrResourceVersionSetOnCreate      500 Internal Error in Kubernetes too: the registry
//	                                   must clear resourceVersion before Create
//
// Any other error (etcd unavailable, context cancelled, codec failure) is wrapped with
// the key and maps to 500.
package etcd3
