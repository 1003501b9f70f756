package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// The name, etag and created time of a document come from its columns; the
// JSON holds the rest.

// PutProject creates or replaces a project.
func (s *Store) PutProject(ctx context.Context, p *v1.Project, c store.Cond) error {
	etag, created, err := s.putDoc(ctx, projectsT, nil, p.Name, p.CreatedAt, p, c)
	if err != nil {
		return err
	}
	p.ETag, p.CreatedAt = etag, created
	return nil
}

// GetProject reads a project.
func (s *Store) GetProject(ctx context.Context, name string) (*v1.Project, error) {
	d, err := s.getDoc(ctx, projectsT, nil, name)
	if err != nil {
		return nil, err
	}
	return decodeProject(d)
}

// ListProjects lists projects by name.
func (s *Store) ListProjects(ctx context.Context, pg store.Page) ([]*v1.Project, string, error) {
	docs, next, err := s.listDocs(ctx, projectsT, nil, pg)
	return decodeAll(docs, next, err, decodeProject)
}

// DeleteProject deletes a project, its cloud accounts, secrets and profiles
// (their rows' foreign keys cascade). It refuses with ErrNotEmpty while the
// project has clusters.
func (s *Store) DeleteProject(ctx context.Context, name string, c store.Cond) error {
	return s.deleteDoc(ctx, projectsT, nil, name, c)
}

func decodeProject(d doc) (*v1.Project, error) {
	p := new(v1.Project)
	if err := decodeDoc(projectsT, d, p); err != nil {
		return nil, err
	}
	p.Name, p.ETag, p.CreatedAt = d.name, d.etag, d.created
	return p, nil
}

// PutCloudAccount creates or replaces a cloud account.
func (s *Store) PutCloudAccount(ctx context.Context, a *store.CloudAccount, c store.Cond) error {
	etag, created, err := s.putDoc(ctx, accountsT, []string{a.Project}, a.Name, a.CreatedAt, &a.CloudAccount, c)
	if err != nil {
		return err
	}
	a.ETag, a.CreatedAt = etag, created
	return nil
}

// GetCloudAccount reads a cloud account, credentials included.
func (s *Store) GetCloudAccount(ctx context.Context, project, name string) (*store.CloudAccount, error) {
	d, err := s.getDoc(ctx, accountsT, []string{project}, name)
	if err != nil {
		return nil, err
	}
	return decodeAccount(project)(d)
}

// ListCloudAccounts lists a project's cloud accounts by name.
func (s *Store) ListCloudAccounts(ctx context.Context, project string, pg store.Page) ([]*store.CloudAccount, string, error) {
	docs, next, err := s.listDocs(ctx, accountsT, []string{project}, pg)
	return decodeAll(docs, next, err, decodeAccount(project))
}

// DeleteCloudAccount deletes a cloud account.
func (s *Store) DeleteCloudAccount(ctx context.Context, project, name string, c store.Cond) error {
	return s.deleteDoc(ctx, accountsT, []string{project}, name, c)
}

func decodeAccount(project string) func(doc) (*store.CloudAccount, error) {
	return func(d doc) (*store.CloudAccount, error) {
		a := &store.CloudAccount{Project: project}
		if err := decodeDoc(accountsT, d, &a.CloudAccount); err != nil {
			return nil, err
		}
		a.Name, a.ETag, a.CreatedAt = d.name, d.etag, d.created
		return a, nil
	}
}

// PutProjectSecret creates or replaces a project secret.
func (s *Store) PutProjectSecret(ctx context.Context, ps *store.ProjectSecret, c store.Cond) error {
	etag, created, err := s.putDoc(ctx, projectSecretsT, []string{ps.Project}, ps.Name, ps.CreatedAt, &ps.Secret, c)
	if err != nil {
		return err
	}
	ps.ETag, ps.CreatedAt = etag, created
	return nil
}

// GetProjectSecret reads a project secret, data included.
func (s *Store) GetProjectSecret(ctx context.Context, project, name string) (*store.ProjectSecret, error) {
	d, err := s.getDoc(ctx, projectSecretsT, []string{project}, name)
	if err != nil {
		return nil, err
	}
	return decodeProjectSecret(project)(d)
}

// ListProjectSecrets lists a project's secrets by name, data included.
func (s *Store) ListProjectSecrets(ctx context.Context, project string, pg store.Page) ([]*store.ProjectSecret, string, error) {
	docs, next, err := s.listDocs(ctx, projectSecretsT, []string{project}, pg)
	return decodeAll(docs, next, err, decodeProjectSecret(project))
}

// DeleteProjectSecret deletes a project secret.
func (s *Store) DeleteProjectSecret(ctx context.Context, project, name string, c store.Cond) error {
	return s.deleteDoc(ctx, projectSecretsT, []string{project}, name, c)
}

func decodeProjectSecret(project string) func(doc) (*store.ProjectSecret, error) {
	return func(d doc) (*store.ProjectSecret, error) {
		ps := &store.ProjectSecret{Project: project}
		if err := decodeDoc(projectSecretsT, d, &ps.Secret); err != nil {
			return nil, err
		}
		ps.Name, ps.ETag, ps.CreatedAt = d.name, d.etag, d.created
		return ps, nil
	}
}

// profileDoc is a profile as stored: every version, oldest first.
type profileDoc struct {
	All []v1.Profile `json:"all"`
}

// PutProfile creates or replaces a profile, every version of it.
func (s *Store) PutProfile(ctx context.Context, p *store.Profile, c store.Cond) error {
	d := profileDoc{All: p.Versions}
	if len(d.All) == 0 {
		d.All = []v1.Profile{p.Profile}
	}
	etag, created, err := s.putDoc(ctx, profilesT, []string{p.Project}, p.Name, p.CreatedAt, &d, c)
	if err != nil {
		return err
	}
	p.ETag, p.CreatedAt = etag, created
	p.SetVersions(d.All)
	return nil
}

// GetProfile reads a profile.
func (s *Store) GetProfile(ctx context.Context, project, name string) (*store.Profile, error) {
	d, err := s.getDoc(ctx, profilesT, []string{project}, name)
	if err != nil {
		return nil, err
	}
	return decodeProfile(project)(d)
}

// ListProfiles lists a project's profiles by name.
func (s *Store) ListProfiles(ctx context.Context, project string, pg store.Page) ([]*store.Profile, string, error) {
	docs, next, err := s.listDocs(ctx, profilesT, []string{project}, pg)
	return decodeAll(docs, next, err, decodeProfile(project))
}

// DeleteProfile deletes a profile.
func (s *Store) DeleteProfile(ctx context.Context, project, name string, c store.Cond) error {
	return s.deleteDoc(ctx, profilesT, []string{project}, name, c)
}

func decodeProfile(project string) func(doc) (*store.Profile, error) {
	return func(d doc) (*store.Profile, error) {
		var pd profileDoc
		if err := decodeDoc(profilesT, d, &pd); err != nil {
			return nil, err
		}
		if len(pd.All) == 0 {
			// Written before profiles had versions: the document is the
			// one version, taken as published.
			var one v1.Profile
			if err := decodeDoc(profilesT, d, &one); err != nil {
				return nil, err
			}
			one.Published = true
			pd.All = []v1.Profile{one}
		}
		p := &store.Profile{Project: project}
		p.Name, p.ETag, p.CreatedAt = d.name, d.etag, d.created
		p.SetVersions(pd.All)
		return p, nil
	}
}

// PutNode creates or replaces a node of an existing cluster (ErrNotFound
// when the cluster does not exist). With c.Fence the writer must hold the
// cluster's lease. events are appended in the same transaction.
func (s *Store) PutNode(ctx context.Context, n *store.Node, c store.Cond, events ...*store.Event) error {
	etag, created, err := s.putDoc(ctx, nodesT, []string{n.Project, n.Cluster}, n.Name, n.CreatedAt, &n.Node, c, events...)
	if err != nil {
		return err
	}
	n.ETag, n.CreatedAt = etag, created
	return nil
}

// GetNode reads a node.
func (s *Store) GetNode(ctx context.Context, k store.Key, name string) (*store.Node, error) {
	d, err := s.getDoc(ctx, nodesT, []string{k.Project, k.Name}, name)
	if err != nil {
		return nil, err
	}
	return decodeNode(k)(d)
}

// ListNodes lists a cluster's nodes by name.
func (s *Store) ListNodes(ctx context.Context, k store.Key, pg store.Page) ([]*store.Node, string, error) {
	docs, next, err := s.listDocs(ctx, nodesT, []string{k.Project, k.Name}, pg)
	return decodeAll(docs, next, err, decodeNode(k))
}

// DeleteNode deletes a node, its instructions and its log; with c.Fence the
// writer must hold the cluster's lease.
func (s *Store) DeleteNode(ctx context.Context, k store.Key, name string, c store.Cond) error {
	return s.deleteDoc(ctx, nodesT, []string{k.Project, k.Name}, name, c, func(ctx context.Context, tx *sql.Tx) error {
		for _, table := range []string{"instructions", "node_logs"} {
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM `+table+` WHERE project = ? AND cluster = ? AND node = ?`), k.Project, k.Name, name); err != nil {
				return err
			}
		}
		return nil
	})
}

// jobDoc is a job's document: the API's Job and the log kept of it.
type jobDoc struct {
	v1.Job
	Log string `json:"log,omitempty"`
}

// PutJob creates or replaces a job of an existing cluster.
func (s *Store) PutJob(ctx context.Context, j *store.Job, c store.Cond) error {
	etag, created, err := s.putDoc(ctx, jobsT, []string{j.Project, j.Cluster}, j.Name, j.CreatedAt, &jobDoc{Job: j.Job, Log: j.Log}, c)
	if err != nil {
		return err
	}
	j.ETag, j.CreatedAt = etag, created
	return nil
}

// GetJob reads a job.
func (s *Store) GetJob(ctx context.Context, k store.Key, name string) (*store.Job, error) {
	d, err := s.getDoc(ctx, jobsT, []string{k.Project, k.Name}, name)
	if err != nil {
		return nil, err
	}
	return decodeJob(k)(d)
}

// ListJobs lists a cluster's jobs by name.
func (s *Store) ListJobs(ctx context.Context, k store.Key, pg store.Page) ([]*store.Job, string, error) {
	docs, next, err := s.listDocs(ctx, jobsT, []string{k.Project, k.Name}, pg)
	return decodeAll(docs, next, err, decodeJob(k))
}

func decodeJob(k store.Key) func(doc) (*store.Job, error) {
	return func(d doc) (*store.Job, error) {
		var jd jobDoc
		if err := decodeDoc(jobsT, d, &jd); err != nil {
			return nil, err
		}
		j := &store.Job{Project: k.Project, Job: jd.Job, Log: jd.Log}
		j.Name, j.Cluster, j.ETag, j.CreatedAt = d.name, k.Name, d.etag, d.created
		return j, nil
	}
}

// nodeColumns are the node fields kept in columns of their own: its state
// and the time of its last heartbeat (NULL when it never sent one), which
// ListStaleNodes queries.
func nodeColumns(v any) ([]string, []any) {
	n := v.(*v1.Node)
	var beat any
	if n.LastHeartbeat != nil {
		beat = toNanos(*n.LastHeartbeat)
	}
	return []string{"state", "heartbeat_at"}, []any{n.State, beat}
}

// ListStaleNodes lists, across every cluster, the nodes in one of states
// whose last heartbeat is older than before, the oldest heartbeat first. An
// index on the heartbeat column serves it: it reads only those nodes (and
// those in other states with an old heartbeat), never all of them.
func (s *Store) ListStaleNodes(ctx context.Context, before time.Time, states []string) ([]*store.Node, error) {
	if len(states) == 0 {
		return nil, nil
	}
	args := []any{toNanos(before)}
	for _, st := range states {
		args = append(args, st)
	}
	out, err := s.queryNodes(ctx, `WHERE heartbeat_at < ? AND state IN (?`+strings.Repeat(", ?", len(states)-1)+`) ORDER BY heartbeat_at`, args...)
	if err != nil {
		return nil, fmt.Errorf("list stale nodes: %w", err)
	}
	return out, nil
}

// ListClustersNodes lists the nodes of project's clusters named, by
// cluster, each cluster's by name, in one read.
func (s *Store) ListClustersNodes(ctx context.Context, project string, clusters []string) (map[string][]*store.Node, error) {
	if len(clusters) == 0 {
		return map[string][]*store.Node{}, nil
	}
	args := []any{project}
	for _, c := range clusters {
		args = append(args, c)
	}
	nodes, err := s.queryNodes(ctx, `WHERE project = ? AND cluster IN (?`+strings.Repeat(", ?", len(clusters)-1)+`) ORDER BY cluster, name`, args...)
	if err != nil {
		return nil, fmt.Errorf("list the nodes of %d clusters of project %s: %w", len(clusters), project, err)
	}
	out := make(map[string][]*store.Node, len(clusters))
	for _, n := range nodes {
		out[n.Cluster] = append(out[n.Cluster], n)
	}
	return out, nil
}

// queryNodes reads the nodes a query's where (and order) selects, across
// clusters.
func (s *Store) queryNodes(ctx context.Context, where string, args ...any) ([]*store.Node, error) {
	rows, err := s.read.QueryContext(ctx, s.q(`SELECT project, cluster, name, etag, created_at, data FROM nodes `+where), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Node
	for rows.Next() {
		var k store.Key
		var d doc
		var created int64
		if err := rows.Scan(&k.Project, &k.Name, &d.name, &d.etag, &created, &d.data); err != nil {
			return nil, err
		}
		d.created = fromNanos(created)
		n, err := decodeNode(k)(d)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

func decodeNode(k store.Key) func(doc) (*store.Node, error) {
	return func(d doc) (*store.Node, error) {
		n := &store.Node{Project: k.Project}
		if err := decodeDoc(nodesT, d, &n.Node); err != nil {
			return nil, err
		}
		n.Name, n.Cluster, n.ETag, n.CreatedAt = d.name, k.Name, d.etag, d.created
		return n, nil
	}
}

// decodeAll turns a page of docs into a page of records with decode.
func decodeAll[T any](docs []doc, next string, err error, decode func(doc) (T, error)) ([]T, string, error) {
	if err != nil {
		return nil, "", err
	}
	out := make([]T, 0, len(docs))
	for _, d := range docs {
		v, err := decode(d)
		if err != nil {
			return nil, "", err
		}
		out = append(out, v)
	}
	return out, next, nil
}
