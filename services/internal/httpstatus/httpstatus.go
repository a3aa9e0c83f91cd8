// Package httpstatus answers HTTP requests outside the apiserver (exec-proxy, the kubelet
// API) with errors shaped as the apiserver's: a JSON metav1.Status whose code is the HTTP
// status, so kubectl shows them as it shows kube-apiserver's. Mirrors
// k8s.io/apiserver/pkg/endpoints/handlers/responsewriters.ErrorNegotiated for JSON.
package httpstatus

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Write writes err as a metav1.Status with its code: an API status error as it is, any
// other error as 500 InternalError.
func Write(w http.ResponseWriter, err error) {
	var statusErr apierrors.APIStatus
	if !errors.As(err, &statusErr) {
		statusErr = apierrors.NewInternalError(err)
	}
	st := statusErr.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	st.Status = metav1.StatusFailure
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	body, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(body)
}

// Responder is the ErrorResponder of k8s.io/apimachinery's UpgradeAwareHandler: the
// proxy's own verdicts (API status errors, e.g. 400 "Upgrade request required") are
// written as they are; any other error, a failure to reach or talk to the backend, is
// logged and written as Wrap(err).
type Responder struct {
	// Logger records backend failures.
	Logger *slog.Logger
	// Message is the log line of a backend failure, e.g. "proxy to kubelet failed".
	Message string
	// Wrap turns a backend failure into the status the client sees; nil means 500.
	Wrap func(error) error
}

// Error implements proxy.ErrorResponder.
func (r *Responder) Error(w http.ResponseWriter, req *http.Request, err error) {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		Write(w, err)
		return
	}
	r.Logger.Error(r.Message, "url", req.URL.String(), "err", err)
	if r.Wrap != nil {
		err = r.Wrap(err)
	}
	Write(w, err)
}
