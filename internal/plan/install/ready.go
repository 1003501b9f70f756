package install

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/distro/kiln"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/sysimages"
)

// Where the cluster keeps its own identity, inside Kubernetes.
const (
	SystemNamespace  = "kiln-system"
	ClusterConfigMap = "kiln-cluster"
)

// KubernetesReady waits, within NodeTimeout, until Kubernetes itself reports
// the node of every machine Ready and its pod network available (on a kiln
// cluster, once the other nodes route to it), and its node controller has
// taken its not-ready and network-unavailable taints off. On the way it gives nodes their role labels
// (kubelets may not set node-role labels themselves) and their pool's
// labels and taints, as soon as they register, writes the
// kiln-system/kiln-cluster ConfigMap with the cluster's id and uid, and marks node
// records READY as Kubernetes reports them Ready. A machine whose agent
// stopped is started again first, and fails the wait if it stops during it
// (machines.Work.WatchMachines).
func (w Work) KubernetesReady(ctx context.Context, machines []provider.MachineSpec) error {
	watch, err := w.r.WatchMachines(ctx, step.Names(machines))
	if err != nil {
		return err
	}
	kc, err := w.r.KubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	deadline := time.Now().Add(w.r.Timing().NodeTimeout)
	tick := time.NewTicker(w.r.Timing().InstructionPoll)
	defer tick.Stop()
	labelled, recorded, dns := map[string]bool{}, false, false
	for {
		missing, err := w.readyPass(ctx, kc, machines, labelled)
		if err == nil && !recorded {
			if err = w.recordClusterID(ctx, kc); err == nil {
				recorded = true
			}
		}
		waiting := ""
		if err == nil && len(missing) == 0 && !dns {
			waiting, err = w.clusterDNS(ctx, kc)
			dns = err == nil && waiting == ""
		}
		if err == nil && len(missing) == 0 && waiting == "" {
			return nil
		}
		if err := watch.Check(ctx); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			msg := "nodes not Ready in Kubernetes: " + strings.Join(missing, ", ")
			if len(missing) == 0 {
				msg = "waiting for " + waiting
			}
			if err != nil {
				msg = fmt.Sprintf("the cluster's API does not answer: %v", err)
			}
			return failure.Retryable(v1.CodeTimeout, err, "after %s, %s", w.r.Timing().NodeTimeout, msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.r.CancelRequested():
			return step.ErrCancelRequested
		case <-tick.C:
		}
	}
}

// readyPass looks once: labels and taints the nodes that need it, approves
// a kubeadm cluster's kubelets' serving certificates (approveKubeletServing),
// marks Ready nodes READY and returns the nodes not Ready yet, each with
// why; a kubeadm node is not Ready before the API server reaches its
// kubelet, whose serving certificate it verifies. A
// node counts as Ready once it takes pods (kubeapi.Node.NotReadyYet): a
// scale-up that succeeds has nodes a Deployment applied next spreads onto.
func (w Work) readyPass(ctx context.Context, kc *kubeapi.Client, machines []provider.MachineSpec, labelled map[string]bool) ([]string, error) {
	nodes, err := kc.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]kubeapi.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	if w.UsesKubeadm() {
		if err := w.approveKubeletServing(ctx, kc, step.Names(machines)); err != nil {
			return nil, err
		}
	}
	var missing []string
	for _, m := range machines {
		n, ok := byName[m.Name]
		if !ok {
			missing = append(missing, m.Name+" (no Node yet)")
			continue
		}
		// Labels and the pool's taints go on as soon as the Node is there,
		// while the node controller's not-ready taint (added a moment after
		// the Node appears) keeps pods off it, so a pod that does not
		// tolerate the pool's taints does not land on it first.
		if !labelled[m.Name] {
			if err := w.configureKubeNode(ctx, kc, n, m); err != nil {
				return nil, err
			}
			labelled[m.Name] = true
		}
		if why := n.NotReadyYet(); why != "" {
			missing = append(missing, m.Name+" ("+why+")")
			continue
		}
		if w.UsesKubeadm() {
			// Through the API server, which verifies the kubelet's serving
			// certificate: what kubectl logs and exec need.
			if _, err := kc.Get(ctx, "/api/v1/nodes/"+url.PathEscape(m.Name)+"/proxy/healthz"); err != nil {
				missing = append(missing, fmt.Sprintf("%s (the API server does not reach its kubelet yet: %v)", m.Name, err))
				continue
			}
		}
		rec, err := w.r.NodeRecords().GetNode(ctx, w.cl.Key(), m.Name)
		if err != nil {
			return nil, err
		}
		if rec.State != v1.NodeReady {
			if err := w.SetNodeState(ctx, m.Name, v1.NodeReady, ""); err != nil {
				return nil, err
			}
		}
	}
	slices.Sort(missing)
	return missing, nil
}

// nodeLabels are the labels a node gets: its role's, the cluster's
// (spec.labels) and its pool's.
func (w Work) nodeLabels(m provider.MachineSpec) map[string]string {
	labels := map[string]string{"node-role.kubernetes.io/" + m.Role: ""}
	maps.Copy(labels, w.cl.Spec.Labels)
	for _, p := range w.cl.Spec.WorkerPools {
		if p.Name == m.Pool && m.Pool != "" {
			maps.Copy(labels, p.Labels)
			labels[v1.LabelPool] = m.Pool
		}
	}
	return labels
}

// configureKubeNode gives a new node what Kiln sets on it in
// Kubernetes: its labels (nodeLabels) and its pool's taints, and makes it
// schedulable again if an earlier drain of Kiln's cordoned it (a scale-down
// that failed, then was undone).
func (w Work) configureKubeNode(ctx context.Context, kc *kubeapi.Client, n kubeapi.Node, m provider.MachineSpec) error {
	if patch := missingLabels(n.Labels, w.nodeLabels(m)); len(patch) > 0 {
		if err := kc.LabelNode(ctx, m.Name, patch); err != nil {
			return fmt.Errorf("label node %s: %w", m.Name, err)
		}
	}
	if err := w.taintKubeNode(ctx, kc, n, m); err != nil {
		return err
	}
	if by := n.Annotations[kubeapi.CordonedBy]; n.Unschedulable && by != "" {
		w.r.Log().Info("uncordoning node", "node", m.Name, "cordonedBy", by)
		if err := kc.Uncordon(ctx, m.Name); err != nil {
			return fmt.Errorf("uncordon node %s: %w", m.Name, err)
		}
		w.r.EventOn(ctx, "Normal", "NodeUncordoned", m.Name,
			fmt.Sprintf("node %s is schedulable again: the spec keeps it (operation %s had cordoned it to drain it)", m.Name, by))
	}
	return nil
}

// taintAttempts bounds the re-reads of a node that keeps changing while its
// taints are set.
const taintAttempts = 5

// taintKubeNode adds the taints of the machine's pool to its node. Taints
// are one list in the Node, which the node controller changes too, so the
// list is written at the resourceVersion it was read at, and read again
// when the node changed meanwhile.
func (w Work) taintKubeNode(ctx context.Context, kc *kubeapi.Client, n kubeapi.Node, m provider.MachineSpec) error {
	want := w.nodeTaints(m)
	for range taintAttempts {
		taints, changed := withTaints(n.Taints, want)
		if !changed {
			return nil
		}
		w.r.Log().Info("tainting node", "node", m.Name, "taints", taints)
		err := kc.SetTaints(ctx, m.Name, n.ResourceVersion, taints)
		if !errors.Is(err, kubeapi.ErrConflict) {
			if err != nil {
				return fmt.Errorf("taint node %s: %w", m.Name, err)
			}
			return nil
		}
		if n, err = kc.GetNode(ctx, m.Name); err != nil {
			return fmt.Errorf("read node %s: %w", m.Name, err)
		}
	}
	return fmt.Errorf("taint node %s: it changed %d times while its taints were written", m.Name, taintAttempts)
}

// nodeTaints are the taints of the machine's pool, as the spec writes them
// (key[=value]:Effect, validated).
func (w Work) nodeTaints(m provider.MachineSpec) []kubeapi.Taint {
	var out []kubeapi.Taint
	if m.Pool == "" {
		return nil
	}
	for _, p := range w.cl.Spec.WorkerPools {
		if p.Name != m.Pool {
			continue
		}
		for _, t := range p.Taints {
			kv, effect, _ := strings.Cut(t, ":")
			k, v, _ := strings.Cut(kv, "=")
			out = append(out, kubeapi.Taint{Key: k, Value: v, Effect: effect})
		}
	}
	return out
}

// withTaints returns have with every taint of want in it: a taint of have
// with the key and effect of a wanted one takes the wanted value; others
// stay (the node controller's, a person's). changed is false when have
// holds them all already.
func withTaints(have, want []kubeapi.Taint) (out []kubeapi.Taint, changed bool) {
	out = slices.Clone(have)
	for _, w := range want {
		i := slices.IndexFunc(out, func(t kubeapi.Taint) bool { return t.Key == w.Key && t.Effect == w.Effect })
		switch {
		case i < 0:
			out = append(out, w)
			changed = true
		case out[i].Value != w.Value:
			out[i].Value = w.Value
			changed = true
		}
	}
	return out, changed
}

// missingLabels are the labels of want that have is missing or has with
// another value.
func missingLabels(have, want map[string]string) map[string]string {
	patch := map[string]string{}
	for k, v := range want {
		if cur, ok := have[k]; !ok || cur != v {
			patch[k] = v
		}
	}
	return patch
}

// dnsReplicas is how many CoreDNS pods a kiln cluster runs.
const dnsReplicas = 2

// clusterDNS applies the cluster DNS of the kiln distribution (CoreDNS),
// also to kubeadm clusters installed from Kiln (whose kubeadm adds no DNS),
// and says what it waits for ("" once a replica answers); other
// distributions have none of Kiln's.
func (w Work) clusterDNS(ctx context.Context, kc *kubeapi.Client) (string, error) {
	if !w.hasKilnDNS() {
		return "", nil
	}
	if err := w.applyClusterDNS(ctx, kc); err != nil {
		return "", err
	}
	st, err := kc.Deployment(ctx, kiln.DNSNamespace, kiln.DNSDeployment)
	if err != nil {
		return "", fmt.Errorf("cluster DNS: %w", err)
	}
	if st.AvailableReplicas == 0 {
		return fmt.Sprintf("the cluster DNS (deployment %s/%s: no replica available yet)", kiln.DNSNamespace, kiln.DNSDeployment), nil
	}
	return "", nil
}

// hasKilnDNS reports whether the cluster's DNS is Kiln's: the kiln
// distribution's, and kubeadm's installed from Kiln.
func (w Work) hasKilnDNS() bool {
	spec := w.cl.Spec
	kubeadmFromKiln := spec.Distribution == v1.DistroKubeadm && v1.IsFromKilnCNI(spec.Network.CNI)
	return spec.Distribution == v1.DistroKiln || kubeadmFromKiln
}

// applyClusterDNS applies the objects of the cluster DNS, if it is Kiln's.
func (w Work) applyClusterDNS(ctx context.Context, kc *kubeapi.Client) error {
	if !w.hasKilnDNS() {
		return nil
	}
	addr, err := kiln.ClusterDNSAddress(w.cl.Spec.Network.ServiceCIDR)
	if err != nil {
		return failure.Terminal(v1.CodeInternal, "cluster DNS: %v", err)
	}
	for _, o := range kiln.DNSObjects(sysimages.CoreDNSImage, addr, dnsReplicas) {
		if err := kc.Apply(ctx, kubeapi.Object(o)); err != nil {
			return fmt.Errorf("cluster DNS: %w", err)
		}
	}
	return nil
}

// recordClusterID writes the cluster's id and uid into
// kiln-system/kiln-cluster.
func (w Work) recordClusterID(ctx context.Context, kc *kubeapi.Client) error {
	if err := kc.EnsureNamespace(ctx, SystemNamespace); err != nil {
		return fmt.Errorf("namespace %s: %w", SystemNamespace, err)
	}
	data := map[string]string{"id": step.ClusterID(w.cl.Key()), "uid": w.cl.UID, "name": w.cl.Name, "project": w.cl.Project}
	if err := kc.ApplyConfigMap(ctx, SystemNamespace, ClusterConfigMap, data); err != nil {
		return fmt.Errorf("configmap %s/%s: %w", SystemNamespace, ClusterConfigMap, err)
	}
	return nil
}

// FreshlyReady waits until every node's kubelet has said it is Ready since
// it was restarted: the restored Node objects say what they said when the
// snapshot was taken, Ready or not.
func (w Work) FreshlyReady(ctx context.Context, nodes []*store.Node, since time.Time) error {
	kc, err := w.r.KubeClient(ctx)
	if err != nil {
		return err
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(ctx, w.r.Timing().NodeTimeout)
	defer cancel()
	tick := time.NewTicker(w.r.Timing().InstructionPoll)
	defer tick.Stop()
	for {
		var waiting []string
		got, err := kc.ListNodes(ctx)
		if err == nil {
			byName := map[string]kubeapi.Node{}
			for _, n := range got {
				byName[n.Name] = n
			}
			for _, n := range nodes {
				if !heardSince(byName[n.Name], since) {
					waiting = append(waiting, n.Name)
				}
			}
			if len(waiting) == 0 {
				return nil
			}
		}
		select {
		case <-w.r.CancelRequested():
			return step.ErrCancelRequested
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("%s not Ready since their kubelets restarted", strings.Join(waiting, ", "))
			}
			return failure.Retryable(v1.CodeTimeout, err, "nodes did not report Ready since their kubelets restarted, within %s: %v", w.r.Timing().NodeTimeout, err)
		case <-tick.C:
		}
	}
}

// heardSince reports whether n's kubelet said Ready at or after since.
func heardSince(n kubeapi.Node, since time.Time) bool {
	for _, c := range n.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True" && !c.LastHeartbeatTime.Before(since)
		}
	}
	return false
}
