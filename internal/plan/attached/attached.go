// Package attached is the step family of attached clusters (provider
// "attached", kiln cluster attach): clusters Kiln did not make. It reaches
// a cluster's API with the kubeconfig its spec.attach names, observes its
// nodes and version, and makes, changes and deletes none of its machines.
// The step lists (plan.AttachedSteps) stay the runner's.
package attached

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/plan/clusterapi"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// Run is what the attached steps need of their run.
type Run interface {
	step.Context
	// Fence is the run's lease: every write is fenced with it.
	Fence() store.Fence
	// GetProjectSecret reads a secret of a project (the kubeconfig's).
	GetProjectSecret(ctx context.Context, project, name string) (*store.ProjectSecret, error)
	// PutClusterSecret writes a secret of the cluster.
	PutClusterSecret(ctx context.Context, k store.Key, name string, value []byte, c store.Cond) error
	// Nodes are the cluster's node records (each change an event).
	Nodes() NodeStore
}

// NodeStore is what the attached steps need of node records.
type NodeStore interface {
	GetNode(ctx context.Context, k store.Key, name string) (*store.Node, error)
	PutNode(ctx context.Context, n *store.Node, c store.Cond, events ...*store.Event) error
	ListNodes(ctx context.Context, k store.Key, pg store.Page) ([]*store.Node, string, error)
	DeleteNode(ctx context.Context, k store.Key, name string, c store.Cond) error
}

// Steps are the attached family's steps of one run.
type Steps struct{ r Run }

// New returns the attached steps of the run r.
func New(r Run) Steps { return Steps{r: r} }

// fenced is the condition of the run's writes.
func (s Steps) fenced() store.Cond {
	f := s.r.Fence()
	return store.Cond{Fence: &f}
}

// Connect (connect-cluster) copies the kubeconfig spec.attach names into the
// cluster's secrets, reads the cluster's version and nodes through it, and
// records them: the endpoint, a node record per Kubernetes node (READY or
// NOT_READY, its role from its labels), and no record for a node gone.
func (s Steps) Connect(ctx context.Context) error {
	cl := s.r.Cluster()
	k := cl.Key()
	a := cl.Spec.Attach
	if a == nil {
		return failure.Terminal(v1.CodeInvalidParameter, "cluster %s is not attached: it names no kubeconfig (spec.attach)", k)
	}
	ps, err := s.r.GetProjectSecret(ctx, k.Project, a.Secret)
	if errors.Is(err, store.ErrNotFound) {
		return failure.Terminal(v1.CodeInvalidParameter, "secret %q of project %s, which spec.attach names, does not exist: kiln cluster attach %s --kubeconfig FILE makes it",
			a.Secret, k.Project, k.Name)
	}
	if err != nil {
		return err
	}
	raw := ps.Data[v1.AttachKubeconfigKey]
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(raw))
	if err != nil || raw == "" {
		return failure.Terminal(v1.CodeInvalidParameter, "key %q of secret %q is not a kubeconfig: %v", v1.AttachKubeconfigKey, a.Secret, err)
	}
	if err := s.r.PutClusterSecret(ctx, k, clusterapi.SecretAttachKubeconfig, []byte(raw), s.fenced()); err != nil {
		return err
	}
	kc, err := clusterapi.FromConfig(cfg)
	if err != nil {
		return failure.Terminal(v1.CodeInvalidParameter, "the kubeconfig of secret %q: %v", a.Secret, err)
	}
	defer kc.Close()
	var version struct {
		GitVersion string `json:"gitVersion"`
	}
	body, err := kc.Get(ctx, "/version")
	if err == nil {
		err = json.Unmarshal(body, &version)
	}
	if err != nil {
		return failure.Retryable(v1.CodeUnavailable, err, "the cluster's API at %s does not answer through its kubeconfig: %v", cfg.Host, err)
	}
	if want := cl.Spec.KubernetesVersion; want != "" && !strings.HasPrefix(version.GitVersion, want) {
		return failure.Terminal(v1.CodeUnsupportedVersion,
			"the cluster runs Kubernetes %s, not %s (spec.kubernetesVersion, or its profile's): Kiln does not upgrade an attached cluster; leave spec.kubernetesVersion empty or set it to %s",
			version.GitVersion, want, version.GitVersion)
	}
	nodes, err := s.observeNodes(ctx, kc)
	if err != nil {
		return err
	}
	u, err := url.Parse(cfg.Host)
	if err == nil && u.Host != "" {
		cl.Status.Endpoint = u.Host
		if u.Port() == "" {
			cl.Status.Endpoint = net.JoinHostPort(u.Hostname(), "443")
		}
	}
	if err := s.r.SaveStatus(ctx, "profile"); err != nil {
		return err
	}
	s.r.Note(fmt.Sprintf("connected: Kubernetes %s, %d node(s)", version.GitVersion, nodes))
	return nil
}

// observeNodes makes the cluster's node records what Kubernetes says of its
// nodes, holding the cluster's lease; it returns how many there are.
func (s Steps) observeNodes(ctx context.Context, kc *kubeapi.Client) (int, error) {
	fenced := func(*store.Node) store.Cond { return s.fenced() }
	return syncNodes(ctx, s.r.Nodes(), kc, s.r.Cluster().Key(), s.r.Now(), fenced)
}

// Observe makes an idle attached cluster's node records what its
// Kubernetes says of its nodes (the health check calls it between
// operations), each written only if unchanged since read: an operation
// that began meanwhile wins.
func Observe(ctx context.Context, st interface {
	NodeStore
	trust.SecretReader
}, cl *store.Cluster) error {
	kc, err := clusterapi.KubeClient(ctx, st, cl.Key(), cl.Status.Endpoint, "kiln:observe")
	if err != nil {
		return err
	}
	defer kc.Close()
	unchanged := func(n *store.Node) store.Cond {
		if n.ETag == "" {
			return store.Cond{IfNoneMatch: "*"}
		}
		return store.Cond{IfMatch: n.ETag}
	}
	_, err = syncNodes(ctx, st, kc, cl.Key(), time.Now(), unchanged)
	return err
}

// syncNodes makes cluster k's node records what Kubernetes lists: one per
// node (its role from its labels, READY or NOT_READY from its Ready
// condition, its InternalIP), none for a node gone; each written with
// cond. It returns how many nodes there are.
func syncNodes(ctx context.Context, st NodeStore, kc *kubeapi.Client, k store.Key, now time.Time, cond func(*store.Node) store.Cond) (int, error) {
	body, err := kc.Get(ctx, "/api/v1/nodes")
	if err != nil {
		return 0, failure.Retryable(v1.CodeUnavailable, err, "list the cluster's nodes: %v", err)
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Status struct {
				Addresses []struct{ Type, Address string } `json:"addresses"`
				NodeInfo  struct {
					KubeletVersion string `json:"kubeletVersion"`
				} `json:"nodeInfo"`
				Conditions []struct{ Type, Status, Message string } `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return 0, fmt.Errorf("decode the cluster's nodes: %w", err)
	}
	seen := map[string]bool{}
	for _, kn := range list.Items {
		name := kn.Metadata.Name
		seen[name] = true
		n, err := st.GetNode(ctx, k, name)
		if errors.Is(err, store.ErrNotFound) {
			n, err = &store.Node{Project: k.Project, Node: v1.Node{Name: name, Cluster: k.Name}}, nil
		}
		if err != nil {
			return 0, err
		}
		was := *n
		n.Role = v1.RoleWorker
		if _, ok := kn.Metadata.Labels["node-role.kubernetes.io/control-plane"]; ok {
			n.Role = v1.RoleControlPlane
		}
		n.State, n.Message = v1.NodeNotReady, "NotReady in Kubernetes"
		for _, c := range kn.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				n.State, n.Message = v1.NodeReady, "Ready in Kubernetes, kubelet "+kn.Status.NodeInfo.KubeletVersion
			}
		}
		for _, ad := range kn.Status.Addresses {
			if ad.Type == "InternalIP" {
				n.Address = ad.Address
			}
		}
		if was.ETag != "" && was.Role == n.Role && was.State == n.State && was.Message == n.Message && was.Address == n.Address {
			continue // as recorded: no write
		}
		at := now.UTC()
		n.LastHeartbeat = &at // when Kiln last saw its state change
		if err := st.PutNode(ctx, n, cond(&was)); err != nil && !errors.Is(err, store.ErrPreconditionFailed) && !errors.Is(err, store.ErrExists) {
			return 0, fmt.Errorf("record node %s: %w", name, err)
		}
	}
	err = store.Each(func(pg store.Page) ([]*store.Node, string, error) { return st.ListNodes(ctx, k, pg) },
		func(n *store.Node) error {
			if seen[n.Name] {
				return nil
			}
			err := st.DeleteNode(ctx, k, n.Name, cond(n))
			if errors.Is(err, store.ErrPreconditionFailed) || errors.Is(err, store.ErrNotFound) {
				return nil
			}
			return err
		})
	return len(list.Items), err
}

// Detach (detach-cluster) ends Kiln's part in an attached cluster: nothing of the
// cluster is touched; its records go with the operation's end.
func (s Steps) Detach(context.Context) error {
	return step.Skipped("the cluster runs on: Kiln forgets it, and the kubeconfig's secret %q stays the project's", s.r.Cluster().Spec.Attach.Secret)
}
