package plan_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro"
	"kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/plan/install"
	"kiln.dev/kiln/internal/provider/edge"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// kubeadmAgents plays the agents of cluster c's hosts: each install
// instruction's params must be a kubeadm plan, which it records in the
// order the instructions arrive and reports done.
type kubeadmAgents struct {
	mu    sync.Mutex
	order []string
	plans map[string]*kubeadm.Plan
	bad   []string
}

func (a *kubeadmAgents) run(ctx context.Context, e *env, hosts []string) {
	k := store.Key{Project: project, Name: "c"}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, h := range hosts {
			pending, _ := e.st.ListInstructions(ctx, k, h, true)
			for _, in := range pending {
				var p kubeadm.Plan
				a.mu.Lock()
				if err := json.Unmarshal(in.Params, &p); err != nil || in.Kind != v1.InstructionInstall || len(p.Commands) == 0 {
					a.bad = append(a.bad, h+": "+in.Kind+" "+string(in.Params))
				} else {
					a.order = append(a.order, h)
					a.plans[h] = &p
				}
				a.mu.Unlock()
				_ = e.st.SetInstructionResult(ctx, in.ID, v1.InstructionResult{Instruction: in.ID, State: v1.StepSucceeded})
			}
		}
	}
}

// file returns the plan's file at path, or nil.
func file(p *kubeadm.Plan, path string) *kubeadm.File {
	for i := range p.Files {
		if p.Files[i].Path == path {
			return &p.Files[i]
		}
	}
	return nil
}

// Provisioning a kubeadm cluster hands each host its kubeadm plan: the first
// control-plane host runs kubeadm init with the cluster CA Kiln keeps, the
// other control-plane hosts join after it, one by one, with the token, the
// CA's hash and the certificate key; workers join last, without the key.
// Only the first host is given the CA's private key.
func TestEdgeKubeadmProvision(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	sp := edgeSpec()
	sp.Distribution, sp.KubernetesVersion = v1.DistroKubeadm, "v1.35.4"
	sp.ControlPlane.Size = 3
	sp.Labels = map[string]string{"team": "payments"}
	sp.Network = v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico"}
	e.beginSteps("c", v1.KindCreate, sp, plan.StepsFor(v1.KindCreate, true))
	e.runOnce(e.runner())

	hosts := []string{"host-a", "host-b", "host-c", "host-d"}
	for i, h := range hosts {
		role := v1.RoleControlPlane
		if h == "host-d" {
			role = v1.RoleWorker
		}
		n := &store.Node{Project: project, Node: v1.Node{Name: h, Cluster: "c", State: v1.NodeConfigured, Role: role,
			Address: "192.0.2." + string(rune('1'+i)), Interface: "eth0", Facts: &v1.NodeFacts{Arch: "arm64"}}}
		if err := e.st.PutNode(t.Context(), n, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	op := e.beginSteps("c", v1.KindProvision, sp,
		[]string{plan.StepCheckNodeConfiguration, plan.StepInstallControlPlane, plan.StepInstallWorkers})
	agents := &kubeadmAgents{plans: map[string]*kubeadm.Plan{}}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { agents.run(ctx, e, hosts) })
	e.runOnce(e.runner())
	stop()
	wg.Wait()

	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s %+v, want Succeeded; steps %v", got.Status, got.Error, stepStates(got))
	}
	if len(agents.bad) > 0 {
		t.Fatalf("instructions that are not kubeadm installs: %v", agents.bad)
	}
	if !slices.Equal(agents.order, hosts) {
		t.Fatalf("install order %v, want %v (control plane one by one from the first, then workers)", agents.order, hosts)
	}

	ca, err := trust.LoadCA(t.Context(), e.st, store.Key{Project: project, Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	hash, err := kubeadm.CACertHash(ca.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	first := agents.plans["host-a"]
	if !slices.Contains(first.Steps(), kubeadm.StepKubeadmInit) || !slices.Contains(first.Steps(), kubeadm.StepInstallCNI) {
		t.Errorf("host-a steps %v, want kubeadm init and the CNI", first.Steps())
	}
	if f := file(first, kubeadm.ClusterCACert); f == nil || f.Content != string(ca.CertPEM()) {
		t.Errorf("host-a is not given the cluster CA certificate: %+v", f)
	}
	if f := file(first, kubeadm.ClusterCAKey); f == nil || f.Content != string(ca.KeyPEM()) || f.Mode != 0o600 {
		t.Errorf("host-a is not given the cluster CA key, mode 0600: %+v", f)
	}
	initConfig := file(first, kubeadm.KubeadmConfigPath).Content
	var join struct{ Token, CertificateKey string }
	raw, err := e.st.GetClusterSecret(t.Context(), store.Key{Project: project, Name: "c"}, install.SecretKubeadmJoin)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &join); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{join.Token, join.CertificateKey, `advertiseAddress: "192.0.2.1"`, `controlPlaneEndpoint: "192.0.2.1:6443"`} {
		if !strings.Contains(initConfig, want) {
			t.Errorf("host-a's kubeadm configuration lacks %q:\n%s", want, initConfig)
		}
	}
	for _, h := range hosts[1:] {
		p := agents.plans[h]
		cfg := file(p, kubeadm.KubeadmConfigPath).Content
		if !slices.Contains(p.Steps(), kubeadm.StepKubeadmJoin) {
			t.Errorf("%s steps %v, want kubeadm join", h, p.Steps())
		}
		for _, want := range []string{join.Token, hash, `apiServerEndpoint: "192.0.2.1:6443"`, `value: "team=payments"`} {
			if !strings.Contains(cfg, want) {
				t.Errorf("%s's kubeadm configuration lacks %q:\n%s", h, want, cfg)
			}
		}
		if hasKey := strings.Contains(cfg, join.CertificateKey); hasKey != (h != "host-d") {
			t.Errorf("%s has the certificate key: %v, want it only on control-plane hosts", h, hasKey)
		}
		for _, f := range p.Files {
			if strings.Contains(f.Content, string(ca.KeyPEM())) {
				t.Errorf("%s is given the cluster CA's private key in %s", h, f.Path)
			}
		}
	}
}

// A kubeadm cluster provisioned already grows: the hosts configured since
// join it (control plane one at a time, then workers), the installed hosts
// are left as they are, and a control-plane host added is never the one
// that runs kubeadm init, even when its name sorts before the installed
// control plane's.
func TestEdgeKubeadmGrowJoinsAddedHosts(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	sp := edgeSpec()
	sp.Distribution, sp.KubernetesVersion = v1.DistroKubeadm, "v1.35.4"
	sp.ControlPlane.Size = 3
	sp.Network = v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico"}
	e.beginSteps("c", v1.KindCreate, sp, plan.StepsFor(v1.KindCreate, true))
	e.runOnce(e.runner())

	hosts := []struct{ name, state, role, addr string }{
		{"host-a", v1.NodeConfigured, v1.RoleControlPlane, "192.0.2.1"},
		{"host-b", v1.NodeConfigured, v1.RoleControlPlane, "192.0.2.2"},
		{"host-m", v1.NodeReady, v1.RoleControlPlane, "192.0.2.9"}, // the installed control plane
		{"host-w", v1.NodeReady, v1.RoleWorker, "192.0.2.10"},
		{"host-x", v1.NodeConfigured, v1.RoleWorker, "192.0.2.11"},
	}
	var names []string
	for _, h := range hosts {
		n := &store.Node{Project: project, Node: v1.Node{Name: h.name, Cluster: "c", State: h.state, Role: h.role,
			Address: h.addr, Interface: "eth0", Facts: &v1.NodeFacts{Arch: "amd64"}}}
		if err := e.st.PutNode(t.Context(), n, store.Cond{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, h.name)
	}
	op := e.beginSteps("c", v1.KindProvision, sp,
		[]string{plan.StepCheckNodeConfiguration, plan.StepInstallControlPlane, plan.StepInstallWorkers})
	agents := &kubeadmAgents{plans: map[string]*kubeadm.Plan{}}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { agents.run(ctx, e, names) })
	e.runOnce(e.runner())
	stop()
	wg.Wait()

	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s %+v, want Succeeded; steps %v", got.Status, got.Error, stepStates(got))
	}
	if len(agents.bad) > 0 {
		t.Fatalf("instructions that are not kubeadm installs: %v", agents.bad)
	}
	if want := []string{"host-a", "host-b", "host-x"}; !slices.Equal(agents.order, want) {
		t.Fatalf("install order %v, want %v (the added control plane one by one, then the added worker; the installed hosts left)", agents.order, want)
	}
	for _, h := range agents.order {
		p := agents.plans[h]
		if slices.Contains(p.Steps(), kubeadm.StepKubeadmInit) || !slices.Contains(p.Steps(), kubeadm.StepKubeadmJoin) {
			t.Errorf("%s steps %v, want kubeadm join and no init", h, p.Steps())
		}
		if f := file(p, kubeadm.ClusterCAKey); f != nil {
			t.Errorf("%s, a host that joins, is given the cluster CA key", h)
		}
		if cfg := file(p, kubeadm.KubeadmConfigPath).Content; !strings.Contains(cfg, `apiServerEndpoint: "192.0.2.9:6443"`) {
			t.Errorf("%s does not join through the installed control plane (192.0.2.9):\n%s", h, cfg)
		}
	}
}

// On a cluster provisioned already, check-node-configuration refuses
// control-plane hosts added that would leave an even number of etcd
// members, before anything is installed.
func TestEdgeGrowRefusesEvenControlPlane(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	sp := edgeSpec()
	sp.ControlPlane.Size = 1
	e.beginSteps("c", v1.KindCreate, sp, plan.StepsFor(v1.KindCreate, true))
	e.runOnce(e.runner())
	e.host("host-a", v1.NodeReady, v1.RoleControlPlane)
	e.host("host-b", v1.NodeConfigured, v1.RoleControlPlane)
	op := e.beginSteps("c", v1.KindProvision, sp, plan.StepsFor(v1.KindProvision, true))
	e.runOnce(e.runner())

	got := e.op(op.ID)
	if got.Status != v1.OpFailed || got.Error.Code != v1.CodeNodeCountMismatch || got.Error.Target != "nodes/host-b.role" {
		t.Fatalf("operation %s %+v, want Failed with NodeCountMismatch on nodes/host-b.role", got.Status, got.Error)
	}
	if s := stepStates(got); s[plan.StepCheckNodeConfiguration] != v1.StepFailed || s[plan.StepRefreshJoinMaterial] != v1.StepPending {
		t.Errorf("steps = %v, want check-node-configuration Failed and nothing after it run", s)
	}
}

// refresh-join-material has nothing to do on a first provision (kubeadm
// init makes the token) nor on another distribution's cluster.
func TestRefreshJoinMaterialSkipped(t *testing.T) {
	for _, tt := range []struct {
		name, distribution, state string
	}{
		{"first provision", v1.DistroKubeadm, v1.NodeConfigured},
		{"local distribution", v1.DistroLocal, v1.NodeReady},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
			sp := edgeSpec()
			sp.Distribution = tt.distribution
			if tt.distribution == v1.DistroKubeadm {
				sp.KubernetesVersion = "v1.35.4"
			}
			e.beginSteps("c", v1.KindCreate, sp, plan.StepsFor(v1.KindCreate, true))
			e.runOnce(e.runner())
			e.host("host-a", tt.state, v1.RoleControlPlane)
			e.host("host-b", v1.NodeConfigured, v1.RoleWorker)
			op := e.beginSteps("c", v1.KindProvision, sp, []string{plan.StepRefreshJoinMaterial})
			e.runOnce(e.runner())
			got := e.op(op.ID)
			if got.Status != v1.OpSucceeded || stepStates(got)[plan.StepRefreshJoinMaterial] != v1.StepSkipped {
				t.Errorf("operation %s %+v, steps %v; want refresh-join-material Skipped", got.Status, got.Error, stepStates(got))
			}
		})
	}
}

// The hosts added join through the endpoint the cluster recorded
// (status.endpoint), even when an installed control-plane host sorts before
// the one it names.
func TestEdgeKubeadmJoinKeepsRecordedEndpoint(t *testing.T) {
	e := newEnv(t)
	e.reg["edge"] = edge.Edge{Versions: distro.Versions()}
	sp := edgeSpec()
	sp.Distribution, sp.KubernetesVersion = v1.DistroKubeadm, "v1.35.4"
	sp.Network = v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico"}
	e.beginSteps("c", v1.KindCreate, sp, plan.StepsFor(v1.KindCreate, true))
	e.runOnce(e.runner())
	k := store.Key{Project: project, Name: "c"}
	cl, err := e.st.GetCluster(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	cl.Status.Endpoint = "192.0.2.9:6443"
	if err := e.st.PutClusterStatus(t.Context(), cl, store.Cond{IfMatch: cl.ETag}); err != nil {
		t.Fatal(err)
	}
	for _, h := range []struct{ name, state, role, addr string }{
		{"host-0", v1.NodeReady, v1.RoleControlPlane, "192.0.2.1"},
		{"host-m", v1.NodeReady, v1.RoleControlPlane, "192.0.2.9"},
		{"host-x", v1.NodeConfigured, v1.RoleWorker, "192.0.2.11"},
	} {
		n := &store.Node{Project: project, Node: v1.Node{Name: h.name, Cluster: "c", State: h.state, Role: h.role,
			Address: h.addr, Interface: "eth0", Facts: &v1.NodeFacts{Arch: "amd64"}}}
		if err := e.st.PutNode(t.Context(), n, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	op := e.beginSteps("c", v1.KindProvision, sp, []string{plan.StepInstallWorkers})
	agents := &kubeadmAgents{plans: map[string]*kubeadm.Plan{}}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { agents.run(ctx, e, []string{"host-0", "host-m", "host-x"}) })
	e.runOnce(e.runner())
	stop()
	wg.Wait()
	if got := e.op(op.ID); got.Status != v1.OpSucceeded {
		t.Fatalf("operation %s %+v, want Succeeded", got.Status, got.Error)
	}
	p := agents.plans["host-x"]
	if p == nil {
		t.Fatalf("host-x got no plan; installed %v", agents.order)
	}
	if cfg := file(p, kubeadm.KubeadmConfigPath).Content; !strings.Contains(cfg, `apiServerEndpoint: "192.0.2.9:6443"`) {
		t.Errorf("host-x does not join through the recorded endpoint 192.0.2.9:6443:\n%s", cfg)
	}
}
