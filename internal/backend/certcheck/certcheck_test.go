package certcheck_test

import (
	"context"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/certcheck"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/trust"
)

type env struct {
	t   *testing.T
	st  store.Store
	now time.Time
	l   *certcheck.Loop
	k   store.Key
	// ca, when set, is the cluster's CA the check sees (a rotation).
	ca *x509.Certificate
}

// newEnv is an idle (Succeeded) local cluster with a CA of ten years and
// node certificates of 90 days, in a real SQLite store, and a Loop over it.
func newEnv(t *testing.T, renewal string, change ...func(*v1.ClusterSpec)) *env {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "kiln.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, st: st, now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC), k: store.Key{Project: "p", Name: "c"}}
	if err := st.PutProject(t.Context(), &v1.Project{Name: "p", ID: "/v1/projects/p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	cl := &store.Cluster{Project: "p", Name: "c", Spec: v1.ClusterSpec{Provider: "local", CertificateTTLDays: 90, CertificateRenewal: renewal}}
	for _, c := range change {
		c(&cl.Spec)
	}
	cl.Status.ProvisioningState = v1.StateCreating
	op := &store.Operation{ID: "op-create", Project: "p", Cluster: "c", Kind: v1.KindCreate, Status: v1.OpInProgress, StartTime: e.now}
	if err := st.BeginOperation(t.Context(), cl, op, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	// The create's worker writes the CA, holding the cluster's lease.
	claimed, err := st.ClaimCluster(t.Context(), "test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("c", 0, e.now)
	if err != nil {
		t.Fatal(err)
	}
	fence := claimed.Lease.Fence()
	if err := st.PutClusterSecret(t.Context(), e.k, trust.SecretCA, append(ca.CertPEM(), ca.KeyPEM()...), store.Cond{Fence: &fence}); err != nil {
		t.Fatal(err)
	}
	claimed.Status.ProvisioningState = v1.StateSucceeded
	if err := st.PutClusterStatus(t.Context(), claimed, store.Cond{Fence: &fence}); err != nil {
		t.Fatal(err)
	}
	if err := st.ReleaseLease(t.Context(), e.k, fence); err != nil {
		t.Fatal(err)
	}
	e.l = certcheck.New(certcheck.Options{
		Store:   st,
		Watched: func(p string) bool { return p == "local" },
		TTL:     func(*store.Cluster) time.Duration { return 90 * 24 * time.Hour },
		CA: func(ctx context.Context, k store.Key) (*x509.Certificate, error) {
			if e.ca != nil {
				return e.ca, nil
			}
			ca, err := trust.LoadCA(ctx, st, k)
			if err != nil {
				return nil, err
			}
			return ca.Certificate(), nil
		},
		Base: check.Base{Steps: plan.PendingSteps, Now: func() time.Time { return e.now }},
	})
	return e
}

// node writes a node whose certificates expire in left.
func (e *env) node(name string, left time.Duration) {
	e.t.Helper()
	at := e.now.Add(left)
	n := &store.Node{Project: "p", Node: v1.Node{Name: name, Cluster: "c", Role: v1.RoleWorker, State: v1.NodeReady, CertificatesExpireAt: &at}}
	if err := e.st.PutNode(e.t.Context(), n, store.Cond{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) check() *store.Cluster {
	e.t.Helper()
	if err := e.l.CheckAll(e.t.Context()); err != nil {
		e.t.Fatal(err)
	}
	cl, err := e.st.GetCluster(e.t.Context(), e.k)
	if err != nil {
		e.t.Fatal(err)
	}
	return cl
}

func condition(cl *store.Cluster) v1.Condition {
	for _, c := range cl.Status.Conditions {
		if c.Type == v1.ConditionCertificatesExpiring {
			return c
		}
	}
	return v1.Condition{}
}

// Far from expiry: status.certificates names the node whose certificates
// expire first, the condition is False, and nothing begins.
func TestNearestExpiryRecorded(t *testing.T) {
	e := newEnv(t, "")
	e.node("c-a", 80*24*time.Hour)
	e.node("c-b", 60*24*time.Hour)
	cl := e.check()
	want := v1.CertificatesStatus{NotAfter: e.now.Add(60 * 24 * time.Hour), Of: "node c-b"}
	if got := cl.Status.Certificates; got == nil || *got != want {
		t.Fatalf("status.certificates = %+v, want %+v", got, want)
	}
	if c := condition(cl); c.Status != "False" || !strings.Contains(c.Message, "node c-b") {
		t.Errorf("condition %+v, want False naming node c-b", c)
	}
	if cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Errorf("an operation began: %s %s", cl.Status.ProvisioningState, cl.Status.CurrentOperation)
	}
	if again := e.check(); again.ETag != cl.ETag {
		t.Error("a check that found nothing new wrote the cluster again")
	}
}

// Within a third of the TTL (30 of 90 days) the check begins a
// rotate-certificates operation, with an event naming the node.
func TestRenewalBegins(t *testing.T) {
	e := newEnv(t, "")
	e.node("c-a", 80*24*time.Hour)
	e.node("c-b", 29*24*time.Hour)
	cl := e.check()
	if cl.Status.ProvisioningState != v1.StateUpdating || cl.Status.CurrentOperation == "" {
		t.Fatalf("cluster %s, operation %s: want a renewal begun", cl.Status.ProvisioningState, cl.Status.CurrentOperation)
	}
	op, err := e.st.GetOperation(t.Context(), cl.Status.CurrentOperation)
	if err != nil {
		t.Fatal(err)
	}
	if op.Kind != v1.KindRotateCertificates || len(op.Steps) != 1 || op.Steps[0].Name != plan.StepRenewCertificates {
		t.Errorf("operation %s %+v", op.Kind, op.Steps)
	}
	evs, _, err := e.st.ListEvents(t.Context(), e.k, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Reason != "CertificatesRenewing" || !strings.Contains(evs[len(evs)-1].Message, "node c-b") {
		t.Errorf("events %+v, want CertificatesRenewing naming node c-b", evs)
	}
}

// With certificateRenewal manual the check only warns: the condition is
// True, names the node and says what to run.
func TestManualRenewalWarns(t *testing.T) {
	e := newEnv(t, v1.CertificateRenewalManual)
	e.node("c-b", 10*24*time.Hour)
	cl := e.check()
	if cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Fatalf("an operation began: %s %s", cl.Status.ProvisioningState, cl.Status.CurrentOperation)
	}
	if c := condition(cl); c.Status != "True" || !strings.Contains(c.Message, "node c-b") || !strings.Contains(c.Message, "kiln cluster rotate-certs c") {
		t.Errorf("condition %+v, want True naming node c-b and the command", c)
	}
}

// A cluster without node certificates recorded (made before they were) is
// judged by its CA; a cluster that is busy is not looked at.
func TestCAAndBusyClusters(t *testing.T) {
	e := newEnv(t, "")
	cl := e.check()
	if got := cl.Status.Certificates; got == nil || got.Of != "the cluster CA" || !got.NotAfter.Equal(e.now.Add(pki.DefaultCAValidity)) {
		t.Errorf("status.certificates = %+v, want the cluster CA's ten years", got)
	}
	e.node("c-b", time.Hour)
	cl.Status.ProvisioningState = v1.StateUpdating
	if err := e.st.PutClusterStatus(t.Context(), cl, store.Cond{IfMatch: cl.ETag}); err != nil {
		t.Fatal(err)
	}
	if got := e.check(); got.Status.CurrentOperation != "" || got.Status.Certificates.Of != "the cluster CA" {
		t.Errorf("a busy cluster was acted on: %+v", got.Status)
	}
}

// The kubeadm distribution's certificates are kubeadm's: tracked and
// warned of, with kubeadm's command, and never renewed by an operation.
func TestKubeadmWarnsOnly(t *testing.T) {
	e := newEnv(t, "", func(s *v1.ClusterSpec) { s.Distribution = v1.DistroKubeadm })
	e.node("c-cp", 10*24*time.Hour)
	cl := e.check()
	if cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Fatalf("an operation began for a kubeadm cluster: %s %s", cl.Status.ProvisioningState, cl.Status.CurrentOperation)
	}
	if got := cl.Status.Certificates; got == nil || got.Of != "node c-cp" {
		t.Errorf("status.certificates = %+v, want node c-cp's", got)
	}
	if c := condition(cl); c.Status != "True" || !strings.Contains(c.Message, "kubeadm certs renew all") {
		t.Errorf("condition %+v, want True with kubeadm's command", c)
	}
}

func conditionOf(cl *store.Cluster, typ string) *v1.Condition {
	for _, c := range cl.Status.Conditions {
		if c.Type == typ {
			return &c
		}
	}
	return nil
}

// A kubeconfig of the kind Kiln no longer issues (year-long, in
// system:masters; a KubeconfigIssued event) signed by the cluster's CA is
// named by the LongLivedKubeconfigs condition until a CA rotation replaces
// the CA; a cluster that never had one gets no such condition.
func TestLongLivedKubeconfigs(t *testing.T) {
	e := newEnv(t, "")
	e.node("c-a", 80*24*time.Hour)
	if c := conditionOf(e.check(), v1.ConditionLongLivedKubeconfigs); c != nil {
		t.Fatalf("a cluster without old kubeconfigs has %+v", c)
	}
	ev := &store.Event{Project: "p", Cluster: "c", Event: v1.Event{Time: e.now.Add(time.Hour), Type: "Normal", Reason: "KubeconfigIssued",
		Message: "an admin kubeconfig was issued to user:admin, valid 365 days"}}
	if err := e.st.AppendEvent(t.Context(), ev); err != nil {
		t.Fatal(err)
	}
	c := conditionOf(e.check(), v1.ConditionLongLivedKubeconfigs)
	if c == nil || c.Status != "True" || !strings.Contains(c.Message, "1 year-long") || !strings.Contains(c.Message, "user:admin") ||
		!strings.Contains(c.Message, "rotate-certs c --ca") {
		t.Fatalf("with an old kubeconfig: %+v; want True, naming it and the rotation that retires it", c)
	}

	rotated, err := pki.NewCA("c", 0, e.now.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	e.ca = rotated.Certificate()
	if c := conditionOf(e.check(), v1.ConditionLongLivedKubeconfigs); c == nil || c.Status != "False" {
		t.Errorf("after the CA was replaced: %+v, want False", c)
	}
}
