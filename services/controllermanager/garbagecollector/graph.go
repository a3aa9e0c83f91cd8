package garbagecollector

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// objectReference names one object of the graph: its owner-reference coordinates
// (apiVersion, kind, name, uid) and its namespace.
type objectReference struct {
	metav1.OwnerReference
	Namespace string
}

// node is one object in the ownership graph: who it depends on (owners, from its
// ownerReferences) and who depends on it. A virtual node stands for an owner no
// informer has shown (yet, or ever: an unwatched kind); the collector checks it
// against the apiserver. Mirrors the graph builder's node.
type node struct {
	identity objectReference
	owners   []metav1.OwnerReference
	// dependents are the nodes whose ownerReferences name this one.
	dependents map[*node]struct{}
	virtual    bool
	// beingDeleted: deletionTimestamp is set; deletingDependents: with the
	// foregroundDeletion finalizer, so dependents go first.
	beingDeleted       bool
	deletingDependents bool
}

// graph is the ownership graph the informers keep and the workers read, guarded by mu.
type graph struct {
	mu        sync.Mutex
	uidToNode map[types.UID]*node
}

// blockingDependents are the dependents whose reference to n says
// blockOwnerDeletion: a foreground delete of n waits for them. Call with mu held.
func (n *node) blockingDependents() []*node {
	var out []*node
	for dep := range n.dependents {
		for _, ref := range dep.owners {
			if ref.UID == n.identity.UID && ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion {
				out = append(out, dep)
			}
		}
	}
	return out
}

// dependentsSnapshot copies n's dependents. Call with mu held.
func (n *node) dependentsSnapshot() []*node {
	out := make([]*node, 0, len(n.dependents))
	for dep := range n.dependents {
		out = append(out, dep)
	}
	return out
}
