// Package diagnose gathers a cluster's diagnostics bundle: a tar.gz of what
// Kiln knows of it at one time, for the person asking "why did it fail".
// The bundle holds the operation (its steps and error) and the cluster's
// recent events, each node's record (state, facts, prechecks) and the log
// its agent sent (the agent's own lines and its instructions' output), and
// what the cluster's API answers (readyz with etcd's check, the nodes,
// the pods that are not running with their events, recent Kubernetes
// events). Secrets are stripped: every value of the cluster's activation
// material and of its project's secrets is replaced by its name, and
// private keys and bearer tokens by a mark, in every file.
package diagnose

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/secretref"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// What a bundle holds of what grows: the newest MaxLogLines log lines of
// each node and the newest MaxEvents events of the cluster.
const (
	MaxLogLines = 2000
	MaxEvents   = 500
)

// Store is what a bundle is read from, and where it is kept.
type Store interface {
	GetOperation(ctx context.Context, id string) (*store.Operation, error)
	ListEvents(ctx context.Context, k store.Key, pg store.Page) ([]*store.Event, string, error)
	ListNodes(ctx context.Context, k store.Key, pg store.Page) ([]*store.Node, string, error)
	ListNodeLogs(ctx context.Context, k store.Key, node string, f store.LogFilter, pg store.Page) ([]v1.LogLine, string, error)
	ListProjectSecrets(ctx context.Context, project string, pg store.Page) ([]*store.ProjectSecret, string, error)
	trust.SecretReader
	PutDiagnostics(ctx context.Context, d *store.Diagnostics, bundle []byte) error
}

// Kube reads the cluster's API: the body of a GET of path.
type Kube interface {
	Get(ctx context.Context, path string) ([]byte, error)
}

// Request says what to gather.
type Request struct {
	Cluster *store.Cluster
	// Operation is the operation the bundle is for ("" for none).
	Operation string
	// Reason says why: "operation ... failed", "requested by ...".
	Reason string
	// Kube is the cluster's API; nil when it has none (sim, no endpoint
	// yet): the bundle says so.
	Kube Kube
	Now  time.Time
}

// Gather builds the bundle of r and keeps it in st, returning its record.
// What could not be read is said in the bundle's README.txt, not an error:
// a bundle is wanted most when things do not answer.
func Gather(ctx context.Context, st Store, r Request) (*store.Diagnostics, error) {
	cl := r.Cluster
	k := cl.Key()
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	secrets, err := secretValues(ctx, st, cl)
	if err != nil {
		return nil, fmt.Errorf("gather diagnostics of cluster %s: %w", k, err)
	}
	b := &bundle{secrets: secrets}
	b.json("cluster.json", map[string]any{"project": cl.Project, "name": cl.Name, "uid": cl.UID, "spec": cl.Spec, "status": cl.Status})
	if r.Operation != "" {
		if op, err := st.GetOperation(ctx, r.Operation); err != nil {
			b.missing("operation.json", err)
		} else {
			b.json("operation.json", op)
		}
	}
	var evs []*store.Event // the newest MaxEvents, oldest first
	err = store.Each(func(pg store.Page) ([]*store.Event, string, error) { return st.ListEvents(ctx, k, pg) },
		func(e *store.Event) error {
			if evs = append(evs, e); len(evs) > MaxEvents {
				evs = evs[1:]
			}
			return nil
		})
	if err != nil {
		b.missing("events.json", err)
	} else {
		b.json("events.json", evs)
	}
	var nodes []*store.Node
	err = store.Each(func(pg store.Page) ([]*store.Node, string, error) { return st.ListNodes(ctx, k, pg) },
		func(n *store.Node) error { nodes = append(nodes, n); return nil })
	if err != nil {
		b.missing("nodes/", err)
	}
	for _, n := range nodes {
		dir := "nodes/" + n.Name + "/"
		b.json(dir+"node.json", n.Node)
		lines, err := nodeLog(ctx, st, k, n.Name)
		if err != nil {
			b.missing(dir+"agent.log", err)
			continue
		}
		var log strings.Builder
		for _, l := range lines {
			fmt.Fprintf(&log, "%s %s %s\n", l.Time.UTC().Format(time.RFC3339Nano), l.Stream, l.Line)
		}
		b.file(dir+"agent.log", []byte(log.String()))
	}
	if r.Kube == nil {
		b.note("kubernetes/: not read: the cluster has no Kubernetes API to read (no endpoint, or its provider runs no Kubernetes)")
	} else {
		b.kube(ctx, r.Kube)
	}

	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	data, files, err := b.close(r, id.String())
	if err != nil {
		return nil, fmt.Errorf("gather diagnostics of cluster %s: %w", k, err)
	}
	sum := sha256.Sum256(data)
	d := &store.Diagnostics{Project: cl.Project, Cluster: cl.Name, Diagnostics: v1.Diagnostics{
		ID: id.String(), Cluster: "/v1/projects/" + cl.Project + "/clusters/" + cl.Name, Operation: r.Operation,
		Reason: r.Reason, Files: files, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), CreatedAt: r.Now.UTC()}}
	if err := st.PutDiagnostics(ctx, d, data); err != nil {
		return nil, err
	}
	return d, nil
}

// kube adds what the cluster's API answers, each read within 10 seconds.
func (b *bundle) kube(ctx context.Context, kc Kube) {
	get := func(name, path string) []byte {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		body, err := kc.Get(ctx, path)
		if err != nil {
			b.missing(name, err)
			return nil
		}
		b.file(name, body)
		return body
	}
	get("kubernetes/readyz.txt", "/readyz?verbose")
	get("kubernetes/nodes.json", "/api/v1/nodes")
	get("kubernetes/events.json", "/api/v1/events?limit=300")
	pods := get("kubernetes/pods-not-running.json", "/api/v1/pods?fieldSelector="+
		url.QueryEscape("status.phase!=Running,status.phase!=Succeeded"))
	var list struct {
		Items []struct {
			Metadata struct{ Name, Namespace string } `json:"metadata"`
		} `json:"items"`
	}
	if pods == nil || json.Unmarshal(pods, &list) != nil {
		return
	}
	for i, p := range list.Items {
		if i == 20 {
			b.note(fmt.Sprintf("kubernetes/pod-events/: the events of the first 20 of %d pods not running", len(list.Items)))
			break
		}
		get("kubernetes/pod-events/"+p.Metadata.Namespace+"_"+p.Metadata.Name+".json",
			"/api/v1/namespaces/"+url.PathEscape(p.Metadata.Namespace)+"/events?fieldSelector="+
				url.QueryEscape("involvedObject.name="+p.Metadata.Name))
	}
}

// nodeLog is the newest MaxLogLines lines of a node's log.
func nodeLog(ctx context.Context, st Store, k store.Key, node string) ([]v1.LogLine, error) {
	var all []v1.LogLine
	pg := store.Page{Limit: 1000}
	for {
		lines, next, err := st.ListNodeLogs(ctx, k, node, store.LogFilter{}, pg)
		if err != nil {
			return nil, err
		}
		all = append(all, lines...)
		if len(all) > MaxLogLines {
			all = all[len(all)-MaxLogLines:]
		}
		if len(lines) == 0 || next == "" || next == pg.Token {
			return all, nil
		}
		pg.Token = next
	}
}

// secretValues are the values a bundle must not hold, keyed by what they
// are: the cluster's passphrase and agent credential, and every key of its
// project's secrets.
func secretValues(ctx context.Context, st Store, cl *store.Cluster) (map[string]string, error) {
	out := map[string]string{}
	if id, secret, pass, err := trust.ClearCredentials(ctx, st, cl.Key()); err == nil {
		out["cluster.agent-credential"], out["cluster.passphrase"] = secret, pass
		_ = id // an id is not a secret: it names the credential
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	err := store.Each(func(pg store.Page) ([]*store.ProjectSecret, string, error) {
		return st.ListProjectSecrets(ctx, cl.Project, pg)
	}, func(ps *store.ProjectSecret) error {
		for key, v := range ps.Data {
			out[secretref.Ref{Secret: ps.Name, Key: key}.String()] = v
		}
		return nil
	})
	return out, err
}

var (
	privateKey = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`)
	bearer     = regexp.MustCompile(`(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}`)
)

// bundle is a bundle's files, stripped of secrets, and what was left out;
// close writes them as a tar.gz.
type bundle struct {
	secrets map[string]string
	files   []bundleFile
	notes   []string
}

type bundleFile struct {
	name string
	data []byte
}

func (b *bundle) json(name string, v any) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b.missing(name, err)
		return
	}
	b.file(name, append(data, '\n'))
}

func (b *bundle) missing(name string, err error) {
	b.note(fmt.Sprintf("%s: could not be read: %v", name, err))
}

func (b *bundle) note(s string) { b.notes = append(b.notes, b.strip(s)) }

// strip is s without a secret.
func (b *bundle) strip(s string) string {
	s = secretref.Redact(s, b.secrets)
	s = privateKey.ReplaceAllString(s, "[private key removed]")
	return bearer.ReplaceAllString(s, "${1}[token removed]")
}

func (b *bundle) file(name string, data []byte) {
	b.files = append(b.files, bundleFile{name, []byte(b.strip(string(data)))})
}

// close writes README.txt and then every file, and returns the archive and
// the names in it.
func (b *bundle) close(r Request, id string) ([]byte, []string, error) {
	files := b.files
	var readme strings.Builder
	fmt.Fprintf(&readme, "Kiln diagnostics %s of cluster %s/%s, gathered %s.\nWhy: %s\n",
		id, r.Cluster.Project, r.Cluster.Name, r.Now.UTC().Format(time.RFC3339), r.Reason)
	if r.Operation != "" {
		fmt.Fprintf(&readme, "Operation: %s\n", r.Operation)
	}
	readme.WriteString("\nSecrets are stripped: the cluster's passphrase and agent credential and its project's secrets'\n" +
		"values appear as [secret NAME], private keys and bearer tokens as a mark.\n\nFiles:\n")
	for _, f := range files {
		fmt.Fprintf(&readme, "  %s (%d bytes)\n", f.name, len(f.data))
	}
	if len(b.notes) > 0 {
		readme.WriteString("\nLeft out:\n")
		for _, n := range b.notes {
			fmt.Fprintf(&readme, "  %s\n", n)
		}
	}
	files = append([]bundleFile{{"README.txt", []byte(b.strip(readme.String()))}}, files...)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	var names []string
	for _, f := range files {
		hdr := &tar.Header{Name: "diagnostics-" + id + "/" + f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: r.Now.UTC()}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, nil, err
		}
		names = append(names, f.name)
	}
	if err := tw.Close(); err != nil {
		return nil, nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), names, nil
}
