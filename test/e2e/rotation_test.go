package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/pki"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/test/waitfor"
)

// TestLocalCertificateRotation: with node certificates valid for 15
// seconds, a real local cluster comes up while its agents renew theirs over
// their sessions (every 10 seconds), and goes on: each node renews at least
// twice, stays READY in Kiln and Ready in Kubernetes, and its agent holds a
// certificate of that lifetime that is not past 80% of it; no session is
// refused meanwhile. Then the cluster is deleted.
func TestLocalCertificateRotation(t *testing.T) {
	t.Parallel()
	// 6 s (a renewal due with 2 s left) lost the race on a loaded machine:
	// an agent late by 2 s holds an expired certificate, refused for good
	// as it should be.
	const validity = 15 * time.Second
	e := start(t, "kilnd", "--node-cert-validity", validity.String())
	e.create(localCluster("rot", 1, false, 1))
	nodes := []string{"rot-cp-0", "rot-default-0"}

	waitfor.Cond(t, "every node to use a renewed certificate twice", 2*time.Minute, func() (bool, error) {
		evs, err := e.c.ListEvents(t.Context(), "default", "rot")
		if err != nil {
			return false, err
		}
		renewed := map[string]int{}
		for _, ev := range evs {
			if ev.Reason == gateway.ReasonCertificateRenewed {
				renewed[ev.Node]++
			}
		}
		for _, n := range nodes {
			if renewed[n] < 2 {
				return false, nil
			}
		}
		return true, nil
	})

	for _, name := range nodes {
		n, err := e.c.GetNode(t.Context(), "default", "rot", name)
		if err != nil {
			t.Fatal(err)
		}
		if n.State != v1.NodeReady {
			t.Errorf("node %s is %s (%s) after renewals, want READY", name, n.State, n.Message)
		}
		cert := agentCertificate(t, e, "rot", name)
		if life := cert.NotAfter.Sub(pki.IssuedAt(cert)); life != validity {
			t.Errorf("%s's agent holds a certificate valid for %s, want %s", name, life, validity)
		}
		// Certificate times have whole seconds: a second of slack.
		if now := time.Now(); now.After(pki.RenewAt(cert).Add(time.Second)) {
			t.Errorf("%s's agent holds a certificate past 80%% of its lifetime: issued %s, now %s",
				name, pki.IssuedAt(cert).Format(time.RFC3339), now.Format(time.RFC3339))
		}
	}
	for name, n := range e.kubeNodes("rot") {
		if !n.ready() {
			t.Errorf("node %s is not Ready in Kubernetes after the renewals", name)
		}
	}
	evs, err := e.c.ListEvents(t.Context(), "default", "rot")
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Reason == gateway.ReasonSessionRefused {
			t.Errorf("a session was refused during the renewals: %s", ev.Message)
		}
	}

	// The delete forgets the nodes and leaves nothing running.
	opID, err := e.c.DeleteCluster(t.Context(), "default", "rot")
	if err != nil {
		t.Fatal(err)
	}
	e.wait("rot", opID)
	if left := processesUnder(filepath.Join(e.data, "machines", "default", "rot")); len(left) > 0 {
		t.Errorf("processes left after delete: %v", left)
	}
}

// TestLocalRotateCertificates (issue 26): kiln cluster rotate-certs on a
// real local cluster of three control-plane nodes and a worker installs
// the three control-plane nodes, then the worker, one at a time. kubectl,
// with a kubeconfig issued before, answers through the load balancer
// throughout; afterwards every node's certificates were issued by the
// operation and every node is READY. (TestLocalComponentCertificatesRenew
// checks that the certificate check starts the same operation by itself.)
func TestLocalRotateCertificates(t *testing.T) {
	t.Parallel()
	const ttl = time.Hour
	e := start(t, "kilnd", "--component-cert-ttl", ttl.String())
	e.create(localCluster("roll", 3, false, 1))
	nodes := []string{"roll-cp-0", "roll-cp-1", "roll-cp-2", "roll-default-0"}
	e.mustKubectl("roll", "get", "nodes") // the kubeconfig, issued before the renewal

	// kubectl every second through the load balancer, until the renewal is done.
	var calls, failures atomic.Int32
	var lastFailure atomic.Value
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			calls.Add(1)
			if out, err := e.kubectl("roll", "get", "nodes", "-o", "name"); err != nil || strings.Count(out, "node/") != len(nodes) {
				failures.Add(1)
				lastFailure.Store(fmt.Sprintf("%v: %s", err, out))
			}
		}
	}()
	e.kiln("cluster", "rotate-certs", "roll", "--wait")
	renewal := e.renewal("roll", time.Minute)
	close(stop)
	<-polled
	t.Logf("kubectl during the renewal: %d calls, %d failed; it took %s", calls.Load(), failures.Load(), renewal.EndTime.Sub(renewal.StartTime).Round(time.Second))
	if n := failures.Load(); n > 0 {
		t.Errorf("kubectl failed %d of %d times during the renewal; the last: %v", n, calls.Load(), lastFailure.Load())
	}
	e.checkRenewed("roll", nodes, &renewal, ttl)
}

// TestLocalComponentCertificatesRenew (issue 26): with the Kubernetes
// certificates of node installs valid for 120 seconds, the certificate
// check renews them by itself when a third of that is left (40 s; the
// node's install and its kubelet's Ready since the restart take up to
// 30 s on a busy machine): a rotate-certificates operation installs the
// node again. Afterwards its certificates were issued by the renewal, it
// is READY, status.certificates names them, and events say the renewal
// began and ended.
func TestLocalComponentCertificatesRenew(t *testing.T) {
	t.Parallel()
	const ttl = 120 * time.Second
	e := start(t, "kilnd", "--component-cert-ttl", ttl.String(), "--cert-check-interval", "2s")
	created := e.create(localCluster("renew", 1, false, 0))
	createdAt := *created.EndTime
	renewal := e.renewal("renew", 3*time.Minute)
	t.Logf("the renewal began %s after the create ended and took %s", renewal.StartTime.Sub(createdAt).Round(time.Second), renewal.EndTime.Sub(renewal.StartTime).Round(time.Second))
	e.checkRenewed("renew", []string{"renew-cp-0"}, &renewal, ttl)
	waitfor.Cond(t, "status.certificates to name a node's certificates", 30*time.Second, func() (bool, error) {
		cl := e.cluster("renew")
		cs := cl.Status.Certificates
		return cs != nil && strings.HasPrefix(cs.Of, "node renew-") && cs.NotAfter.After(renewal.StartTime), nil
	})
	evs := e.events("renew")
	if !slices.ContainsFunc(evs, func(ev v1.Event) bool { return ev.Reason == "CertificatesRenewing" }) ||
		!slices.ContainsFunc(evs, func(ev v1.Event) bool { return ev.Reason == "CertificatesRenewed" }) {
		t.Errorf("no CertificatesRenewing and CertificatesRenewed events in %+v", evs)
	}
}

// renewal waits for the cluster's rotate-certificates operation to succeed
// and returns it; a failed one fails the test.
func (e *env) renewal(cluster string, within time.Duration) v1.Operation {
	e.t.Helper()
	var renewal v1.Operation
	waitfor.Cond(e.t, "a rotate-certificates operation of "+cluster+" to succeed", within, func() (bool, error) {
		ops, err := e.c.ListOperations(e.t.Context(), "default", cluster)
		if err != nil {
			return false, err
		}
		for _, op := range ops {
			if op.Properties.Kind != v1.KindRotateCertificates {
				continue
			}
			if op.Status == v1.OpFailed {
				return false, fmt.Errorf("renewal %s failed: %+v", op.ID, op.Error)
			}
			if op.Status == v1.OpSucceeded {
				renewal = op
				return true, nil
			}
		}
		return false, nil
	})
	return renewal
}

// checkRenewed checks that the renewal succeeded its renew-certificates
// step and that every node's certificates, valid for ttl, were issued
// after it began, and the node is READY.
func (e *env) checkRenewed(cluster string, nodes []string, renewal *v1.Operation, ttl time.Duration) {
	e.t.Helper()
	if s := stepOf(renewal, "renew-certificates"); s.State != v1.StepSucceeded {
		e.t.Errorf("renew-certificates step: %+v", s)
	}
	started := renewal.StartTime
	for _, name := range nodes {
		n, err := e.c.GetNode(e.t.Context(), "default", cluster, name)
		if err != nil {
			e.t.Fatal(err)
		}
		if n.CertificatesExpireAt == nil || !n.CertificatesExpireAt.Add(-ttl).After(started.Add(-time.Second)) {
			e.t.Errorf("node %s: certificates expire at %v, want issued after the renewal began (%s)", name, n.CertificatesExpireAt, started)
		}
		if n.State != v1.NodeReady {
			e.t.Errorf("node %s is %s (%s) after the renewal", name, n.State, n.Message)
		}
	}
}

// TestLocalCARotation replaces a real local cluster's CA with kiln cluster
// rotate-certs --ca, then --ca --finish, as a user does. During the
// overlap a kubeconfig issued before the rotation and one issued during it
// both work with kubectl, and a second begin is refused. After the finish
// the old kubeconfig is refused (its client certificate by the API server
// too, even when the client trusts the new CA: anonymous at best), while the overlap's and a
// new one work; every agent holds a node certificate of the new CA, every
// node is READY, and finishing again is refused.
func TestLocalCARotation(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	e.create(localCluster("carot", 1, false, 1))
	nodes := []string{"carot-cp-0", "carot-default-0"}
	before := e.kubeconfigFile("carot", "before")
	e.kubectlWith(before, "get", "nodes")
	oldCA := kubeconfigCert(t, before, "certificate-authority-data")

	e.kiln("cluster", "rotate-certs", "carot", "--ca", "--wait")
	cl := e.cluster("carot")
	if r := cl.Status.CARotation; r == nil || r.Phase != string(trust.CAOverlap) {
		t.Fatalf("status.caRotation after rotate-certs --ca: %+v, want phase overlap", r)
	}
	newCA := cl.Status.CARotation.NewCA
	during := e.kubeconfigFile("carot", "overlap")
	if got := kubeconfigCert(t, during, "client-certificate-data").Issuer.CommonName; got != newCA {
		t.Errorf("a kubeconfig issued during the overlap is signed by %q, want the new CA %q", got, newCA)
	}
	for _, cfg := range []string{before, during} {
		if out := e.kubectlWith(cfg, "get", "nodes", "-o", "name"); strings.Count(out, "node/") != len(nodes) {
			t.Errorf("kubectl with %s during the overlap: %q", filepath.Base(cfg), out)
		}
	}
	if _, stderr, err := e.kilnErr("cluster", "rotate-certs", "carot", "--ca"); err == nil || !strings.Contains(stderr, "under way") {
		t.Errorf("a second CA rotation during the overlap: err %v, stderr %q; want refused as under way", err, stderr)
	}

	e.kiln("cluster", "rotate-certs", "carot", "--ca", "--finish", "--wait")
	if out, err := e.kubectlErr(before, "get", "nodes"); err == nil {
		t.Errorf("a kubeconfig issued before the CA rotation still works after its finish: %s", out)
	}
	// The API server itself no longer takes the old client certificate:
	// the request is anonymous (403 for system:anonymous), or refused.
	code, body := apiStatus(t, e.cluster("carot").Status.Endpoint, before, during)
	if code != http.StatusUnauthorized && (code != http.StatusForbidden || !strings.Contains(body, "system:anonymous")) {
		t.Errorf("the old client certificate, verifying the API server with the new CA: HTTP %d %s; want 401, or 403 as system:anonymous", code, body)
	}
	after := e.kubeconfigFile("carot", "after")
	if n := strings.Count(kubeconfigField(t, after, "certificate-authority-data"), "BEGIN CERTIFICATE"); n != 1 {
		t.Errorf("a kubeconfig issued after the finish trusts %d CAs, want only the new one", n)
	}
	if got := kubeconfigCert(t, after, "certificate-authority-data").Subject.CommonName; got != newCA || got == oldCA.Subject.CommonName {
		t.Errorf("after the finish the cluster CA is %q, want the new one %q", got, newCA)
	}
	for _, cfg := range []string{during, after} {
		if out := e.kubectlWith(cfg, "get", "nodes", "-o", "name"); strings.Count(out, "node/") != len(nodes) {
			t.Errorf("kubectl with %s after the finish: %q", filepath.Base(cfg), out)
		}
	}
	cl = e.cluster("carot")
	if cl.Status.CARotation != nil {
		t.Errorf("status.caRotation after the finish: %+v, want none", cl.Status.CARotation)
	}
	for _, name := range nodes {
		n, err := e.c.GetNode(t.Context(), "default", "carot", name)
		if err != nil {
			t.Fatal(err)
		}
		if n.State != v1.NodeReady {
			t.Errorf("node %s is %s (%s) after the CA rotation", name, n.State, n.Message)
		}
		if got := agentCertificate(t, e, "carot", name).Issuer.CommonName; got != newCA {
			t.Errorf("node %s's agent holds a certificate of %q, want the new CA %q", name, got, newCA)
		}
	}
	if !slices.ContainsFunc(e.events("carot"), func(ev v1.Event) bool { return ev.Reason == "CARotated" }) {
		t.Error("no CARotated event")
	}
	if _, stderr, err := e.kilnErr("cluster", "rotate-certs", "carot", "--ca", "--finish"); err == nil || !strings.Contains(stderr, "no CA rotation") {
		t.Errorf("finishing a CA rotation that is over: err %v, stderr %q; want refused", err, stderr)
	}
}

// kubeconfigFile writes a new admin kubeconfig of cluster (project
// default) to a file named by tag and returns its path.
func (e *env) kubeconfigFile(cluster, tag string) string {
	e.t.Helper()
	b, err := e.c.AdminKubeconfig(e.t.Context(), "default", cluster, "24h")
	if err != nil {
		e.t.Fatalf("kubeconfig: %v", err)
	}
	p := filepath.Join(e.data, cluster+"-"+tag+".kubeconfig")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// kubectlErr runs kiln-kube kubectl with the kubeconfig cfg.
func (e *env) kubectlErr(cfg string, args ...string) (string, error) {
	cmd := exec.CommandContext(e.t.Context(), kubeBin, append([]string{"kubectl", "--kubeconfig", cfg, "--request-timeout", "20s"}, args...)...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String() + stderr.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.String(), nil
}

func (e *env) kubectlWith(cfg string, args ...string) string {
	e.t.Helper()
	out, err := e.kubectlErr(cfg, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// kubeconfigField is the PEM of a base64 field of a kubeconfig Kiln wrote
// (certificate-authority-data, client-certificate-data, client-key-data).
func kubeconfigField(t *testing.T, cfg, field string) string {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(field + `:\s*"?([A-Za-z0-9+/=]+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s has no %s", cfg, field)
	}
	pemBytes, err := base64.StdEncoding.DecodeString(string(m[1]))
	if err != nil {
		t.Fatalf("%s's %s: %v", cfg, field, err)
	}
	return string(pemBytes)
}

// kubeconfigCert is the first certificate of a kubeconfig's field.
func kubeconfigCert(t *testing.T, cfg, field string) *x509.Certificate {
	t.Helper()
	c, err := pki.ParseCertificate([]byte(kubeconfigField(t, cfg, field)))
	if err != nil {
		t.Fatalf("%s's %s: %v", cfg, field, err)
	}
	return c
}

// apiStatus is the HTTP status and body the API server at endpoint answers
// a GET of /api with, to the client certificate of kubeconfig client,
// verifying the server with the CAs of kubeconfig trust.
func apiStatus(t *testing.T, endpoint, client, trust string) (int, string) {
	t.Helper()
	pair, err := tls.X509KeyPair([]byte(kubeconfigField(t, client, "client-certificate-data")), []byte(kubeconfigField(t, client, "client-key-data")))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(kubeconfigField(t, trust, "certificate-authority-data")))
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}}
	resp, err := hc.Get("https://" + endpoint + "/api")
	if err != nil {
		t.Fatalf("GET /api: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body)
}

// agentCertificate is the node certificate a local node's agent holds.
func agentCertificate(t *testing.T, e *env, cluster, node string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(e.data, "machines", "default", cluster, node, "agent", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Certificate string `json:"certificate"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	c, err := pki.ParseCertificate([]byte(st.Certificate))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDockerCARotation replaces the CA of a cluster of real nodes: a
// kubeconfig from before works through the overlap and is refused after
// the finish; the nodes are Ready, and CoreDNS, replaced during the
// overlap, still talks to the API server (its log has no certificate
// error) and answers kubectl logs through the kubelet.
func TestDockerCARotation(t *testing.T) {
	t.Parallel()
	e := startDocker(t)
	e.create(dockerCluster("dca", "", 1, false, 1))
	before := e.kubeconfigFile("dca", "before")
	e.kubectlWith(before, "get", "nodes")

	t0 := time.Now()
	e.kiln("cluster", "rotate-certs", "dca", "--ca", "--wait")
	t.Logf("rotate-certs --ca took %s", time.Since(t0).Round(time.Second))
	e.kubectlWith(before, "get", "nodes")
	restarted := e.kubectlWith(before, "-n", "kube-system", "get", "deployment", "coredns",
		"-o", `jsonpath={.spec.template.metadata.annotations.kiln\.dev/restartedAt}`)
	if restarted == "" {
		t.Error("CoreDNS was not restarted during the overlap")
	}

	t0 = time.Now()
	e.kiln("cluster", "rotate-certs", "dca", "--ca", "--finish", "--wait")
	t.Logf("rotate-certs --ca --finish took %s", time.Since(t0).Round(time.Second))
	if out, err := e.kubectlErr(before, "get", "nodes"); err == nil {
		t.Errorf("a kubeconfig from before the CA rotation works after its finish: %s", out)
	}
	after := e.kubeconfigFile("dca", "after")
	out := e.kubectlWith(after, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}: {.status.conditions[?(@.type=="Ready")].message}{"\n"}{end}`)
	if strings.Count(out, " True ") != 2 {
		t.Errorf("nodes after the CA rotation: %q, want 2 Ready", out)
	}
	waitfor.Cond(t, "CoreDNS to run after the CA rotation", 3*time.Minute, func() (bool, error) {
		out, err := e.kubectlErr(after, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns",
			"--field-selector", "status.phase=Running", "-o", "name")
		return err == nil && strings.Contains(out, "pod/"), nil
	})
	// The API server restarted on its new certificate during the finish:
	// CoreDNS watched through it, verifying it with both CAs. Its pods'
	// logs come through their kubelets; a pod the rollout is replacing may
	// be gone from its kubelet by the time its log is asked for, so the
	// logs are those of the pods that run once the rollout is done.
	var logs string
	waitfor.Cond(t, "the logs of CoreDNS's running pods after the CA rotation", 3*time.Minute, func() (bool, error) {
		if out, err := e.kubectlErr(after, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=20s"); err != nil {
			return false, waitfor.NotYet(fmt.Errorf("rollout status: %v: %s", err, out))
		}
		pods, err := e.kubectlErr(after, "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns",
			"--field-selector", "status.phase=Running", "-o", "name")
		if err != nil || len(strings.Fields(pods)) == 0 {
			return false, waitfor.NotYet(fmt.Errorf("running CoreDNS pods %q: %v", pods, err))
		}
		var all []string
		for _, pod := range strings.Fields(pods) {
			out, err := e.kubectlErr(after, "-n", "kube-system", "logs", pod)
			if err != nil {
				return false, waitfor.NotYet(fmt.Errorf("kubectl logs %s: %v: %s", pod, err, out))
			}
			all = append(all, out)
		}
		logs = strings.Join(all, "\n")
		return true, nil
	})
	for _, bad := range []string{"x509", "unknown authority", "Unauthorized"} {
		if strings.Contains(logs, bad) {
			t.Errorf("CoreDNS's log after the CA rotation says %q:\n%s", bad, logs)
		}
	}
}
