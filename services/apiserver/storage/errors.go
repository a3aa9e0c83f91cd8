package storage

import (
	"errors"
	"fmt"
)

// Error codes of StorageError. Mirrors k8s.io/apiserver/pkg/storage/errors.go.
const (
	ErrCodeKeyNotFound int = iota + 1
	ErrCodeKeyExists
	ErrCodeResourceVersionConflicts
	ErrCodeInvalidObj
	ErrCodeResourceVersionTooOld
)

// StorageError is the error every Interface method returns for a condition the caller
// must map to an API status: Code is one of the ErrCode constants, Key the etcd key,
// ResourceVersion the revision involved (0 when none) and AdditionalErrorMsg free text.
type StorageError struct {
	Code               int
	Key                string
	ResourceVersion    int64
	AdditionalErrorMsg string
}

func (e *StorageError) Error() string {
	var what string
	switch e.Code {
	case ErrCodeKeyNotFound:
		what = "key not found"
	case ErrCodeKeyExists:
		what = "key exists"
	case ErrCodeResourceVersionConflicts:
		what = "resource version conflicts"
	case ErrCodeInvalidObj:
		what = "invalid object"
	case ErrCodeResourceVersionTooOld:
		what = "resource version too old"
	default:
		what = fmt.Sprintf("storage error %d", e.Code)
	}
	s := fmt.Sprintf("%s: %s, ResourceVersion: %d", what, e.Key, e.ResourceVersion)
	if e.AdditionalErrorMsg != "" {
		s += ", AdditionalErrorMsg: " + e.AdditionalErrorMsg
	}
	return s
}

// NewKeyNotFoundError returns ErrCodeKeyNotFound for key.
func NewKeyNotFoundError(key string, rv int64) *StorageError {
	return &StorageError{Code: ErrCodeKeyNotFound, Key: key, ResourceVersion: rv}
}

// NewKeyExistsError returns ErrCodeKeyExists for key.
func NewKeyExistsError(key string, rv int64) *StorageError {
	return &StorageError{Code: ErrCodeKeyExists, Key: key, ResourceVersion: rv}
}

// NewResourceVersionConflictsError returns ErrCodeResourceVersionConflicts for key.
func NewResourceVersionConflictsError(key string, rv int64) *StorageError {
	return &StorageError{Code: ErrCodeResourceVersionConflicts, Key: key, ResourceVersion: rv}
}

// NewInvalidObjError returns ErrCodeInvalidObj (a failed precondition) for key.
func NewInvalidObjError(key, msg string) *StorageError {
	return &StorageError{Code: ErrCodeInvalidObj, Key: key, AdditionalErrorMsg: msg}
}

// NewTooOldResourceVersionError returns ErrCodeResourceVersionTooOld: rv was requested
// and etcd has compacted everything before compactedRev.
func NewTooOldResourceVersionError(rv, compactedRev int64) *StorageError {
	return &StorageError{Code: ErrCodeResourceVersionTooOld, ResourceVersion: rv,
		AdditionalErrorMsg: fmt.Sprintf("too old resource version: %d (%d)", rv, compactedRev)}
}

func hasCode(err error, code int) bool {
	var se *StorageError
	return errors.As(err, &se) && se.Code == code
}

// IsNotFound reports whether err is ErrCodeKeyNotFound.
func IsNotFound(err error) bool { return hasCode(err, ErrCodeKeyNotFound) }

// IsExist reports whether err is ErrCodeKeyExists.
func IsExist(err error) bool { return hasCode(err, ErrCodeKeyExists) }

// IsConflict reports whether err is ErrCodeResourceVersionConflicts.
func IsConflict(err error) bool { return hasCode(err, ErrCodeResourceVersionConflicts) }

// IsInvalidObj reports whether err is ErrCodeInvalidObj.
func IsInvalidObj(err error) bool { return hasCode(err, ErrCodeInvalidObj) }

// IsTooOldResourceVersion reports whether err is ErrCodeResourceVersionTooOld.
func IsTooOldResourceVersion(err error) bool { return hasCode(err, ErrCodeResourceVersionTooOld) }

// ErrInvalidResourceVersion is wrapped by the error GetList and Watch return for a
// resourceVersion that is not "", "0" or a positive decimal etcd revision. The registry
// maps it to 400 Bad Request.
var ErrInvalidResourceVersion = errors.New("invalid resource version")

// ErrInvalidContinue is wrapped by the error GetList returns for a continue token the
// store did not issue, or one sent together with a resourceVersion other than "" and
// "0". The registry maps it to 400 Bad Request, as Kubernetes does.
var ErrInvalidContinue = errors.New("invalid continue token")

// ErrResourceVersionTooLarge is wrapped by the error GetList returns when asked to read
// at a revision etcd has not reached yet. The registry maps it to 504 Timeout with the
// cause ResourceVersionTooLarge, as Kubernetes' storage.NewTooLargeResourceVersionError
// does; client-go's reflector then relists.
var ErrResourceVersionTooLarge = errors.New("too large resource version")
