package agent

import (
	"crypto/x509"
	"testing"
	"time"

	"kiln.dev/kiln/internal/pki"
)

// TestRenewAt: an agent renews at two thirds of its certificate's lifetime
// counted from its issue, before the 80% by which it must have renewed,
// for certificates of a year as of seconds; a failed renewal is asked
// again after a tenth of what is left, within bounds.
func TestRenewAt(t *testing.T) {
	ca, err := pki.NewCA("c", 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	issued := time.Now().Truncate(time.Second) // certificate times have whole seconds
	tests := []struct {
		name      string
		validFor  time.Duration
		want      time.Duration // after the issue
		retryHalf time.Duration // the retry asked at half the lifetime
	}{
		{"a year", 365 * 24 * time.Hour, 365 * 24 * time.Hour * 2 / 3, maxRenewRetry},
		{"an hour", time.Hour, 40 * time.Minute, 3 * time.Minute},
		{"six seconds", 6 * time.Second, 4 * time.Second, 300 * time.Millisecond},
		{"a second", time.Second, 666666666 * time.Nanosecond, minRenewRetry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, _, err := ca.Issue(pki.CertRequest{CommonName: "n", Usage: pki.UsageClient, ValidFor: tt.validFor, Now: issued})
			if err != nil {
				t.Fatal(err)
			}
			cert, err := pki.ParseCertificate(certPEM)
			if err != nil {
				t.Fatal(err)
			}
			got := renewAt(cert)
			if d := got.Sub(issued); d != tt.want {
				t.Errorf("renewAt = issue + %s, want + %s", d, tt.want)
			}
			if !got.Before(pki.RenewAt(cert)) {
				t.Errorf("renewAt %s is not before 80%% of the lifetime (%s)", got, pki.RenewAt(cert))
			}
			if r := renewRetry(cert, issued.Add(tt.validFor/2)); r != tt.retryHalf {
				t.Errorf("retry at half the lifetime = %s, want %s", r, tt.retryHalf)
			}
		})
	}
	expired := &x509.Certificate{NotBefore: issued.Add(-time.Hour), NotAfter: issued}
	if r := renewRetry(expired, issued.Add(time.Hour)); r != minRenewRetry {
		t.Errorf("retry of an expired certificate = %s, want %s", r, minRenewRetry)
	}
}
