package v1

import "time"

// CA rotation requests (RotateCertificatesRequest.CA).
const (
	CARotationBegin  = "begin"
	CARotationFinish = "finish"
)

// RotateCertificatesRequest is the optional body of POST
// .../rotate-certificates. Without it, or with no ca, the node
// certificates are renewed with the cluster CA (KindRotateCertificates).
type RotateCertificatesRequest struct {
	// CA is "begin" (KindRotateCA) or "finish" (KindFinishCARotation).
	CA string `json:"ca,omitempty"`
}

// CARotationStatus is status.caRotation.
type CARotationStatus struct {
	// Phase is trusting (nodes learn to trust the new CA), overlap (both
	// CAs trusted: kubeconfigs of either work; the finish ends it),
	// signing (certificates of the new CA installed) or narrowing (the old
	// CA no longer trusted).
	Phase string    `json:"phase"`
	Since time.Time `json:"since"`
	// NewCA is the new CA's name (its certificate's common name).
	NewCA string `json:"newCA"`
}
