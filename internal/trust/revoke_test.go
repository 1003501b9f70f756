package trust_test

import (
	"errors"
	"testing"
	"time"

	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// TestRevokeNode: a node's current and renewed certificates are revoked by
// serial with who, why and when, its record is marked revoked, a second
// revoke adds nothing, a registration after it is not revoked, and a
// cluster that is gone has nothing to revoke.
func TestRevokeNode(t *testing.T) {
	st, k := newCluster(t, "c")
	ctx := t.Context()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	why := trust.Why{By: "operation op-1 (update)", Reason: "the node was removed from the cluster"}

	// Never had a certificate: its record is revoked, no serial is.
	got, err := trust.RevokeNode(ctx, st, k, "n0", why, now)
	if err != nil || len(got) != 0 {
		t.Fatalf("revoke a node without certificates: %v, %v", got, err)
	}
	if rec, err := trust.ReadNodeCert(ctx, st, k, "n0"); err != nil || rec.RevokedAt == nil {
		t.Fatalf("record of n0: %+v, %v", rec, err)
	}

	if err := trust.RecordNodeCert(ctx, st, k, "n1", "a1"); err != nil {
		t.Fatal(err)
	}
	if err := st.UpdateClusterSecrets(ctx, k, store.SecretWrite{Name: trust.NodeCertSecret("n1"), Value: []byte(`{"serial":"a1","next":"b2"}`)}); err != nil {
		t.Fatal(err)
	}
	if got, err = trust.RevokeNode(ctx, st, k, "n1", why, now); err != nil || len(got) != 2 || got[0] != "a1" || got[1] != "b2" {
		t.Fatalf("revoke n1: %v, %v; want [a1 b2]", got, err)
	}
	for _, serial := range []string{"a1", "b2"} {
		r, err := trust.CertRevoked(ctx, st, k, serial)
		if err != nil || r == nil {
			t.Fatalf("serial %s not revoked: %v", serial, err)
		}
		want := trust.Revocation{Serial: serial, Node: "n1", At: now, By: why.By, Reason: why.Reason}
		if *r != want {
			t.Errorf("revocation of %s: %+v, want %+v", serial, *r, want)
		}
		if s := r.String(); s != "the node certificate (serial "+serial+") of node n1 was revoked at 2026-11-29T10:00:00Z by operation op-1 (update): the node was removed from the cluster" {
			t.Errorf("revocation says %q", s)
		}
	}
	if got, err = trust.RevokeNode(ctx, st, k, "n1", why, now.Add(time.Hour)); err != nil || len(got) != 0 {
		t.Errorf("a second revoke: %v, %v; want nothing added", got, err)
	}
	if r, _ := trust.CertRevoked(ctx, st, k, "a1"); r == nil || !r.At.Equal(now) {
		t.Errorf("a second revoke changed the first's record: %+v", r)
	}

	// Registered again: the new certificate is the node's and not revoked.
	if err := trust.RecordNodeCert(ctx, st, k, "n1", "c3"); err != nil {
		t.Fatal(err)
	}
	if r, err := trust.CertRevoked(ctx, st, k, "c3"); r != nil || err != nil {
		t.Errorf("the new certificate: %+v, %v; want not revoked", r, err)
	}
	if rec, err := trust.ReadNodeCert(ctx, st, k, "n1"); err != nil || rec.RevokedAt != nil || rec.Serial != "c3" {
		t.Errorf("record after registering again: %+v, %v", rec, err)
	}

	if got, err := trust.RevokeNode(ctx, st, store.Key{Project: "p", Name: "gone"}, "n", why, now); err != nil || len(got) != 0 {
		t.Errorf("revoke in a cluster that is gone: %v, %v", got, err)
	}
	if _, err := trust.CertRevoked(ctx, st, store.Key{Project: "p", Name: "gone"}, "a1"); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CertRevoked in a cluster that is gone: %v", err)
	}
}
