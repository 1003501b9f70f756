package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

const clusterCols = `project, name, etag, spec, status, lease_owner, lease_token, lease_expiry, dequeues, uid, lease_taken_from`

// active reports whether a cluster in this state has an operation running.
func active(state string) bool {
	return state == v1.StateCreating || state == v1.StateUpdating || state == v1.StateDeleting
}

type scanner interface{ Scan(dest ...any) error }

func scanCluster(r scanner) (*store.Cluster, error) {
	cl := new(store.Cluster)
	var spec, status string
	var expiry int64
	if err := r.Scan(&cl.Project, &cl.Name, &cl.ETag, &spec, &status,
		&cl.Lease.Owner, &cl.Lease.Token, &expiry, &cl.Dequeues, &cl.UID, &cl.Lease.TakenFrom); err != nil {
		return nil, err
	}
	cl.Lease.Expiry = fromNanos(expiry)
	if err := json.Unmarshal([]byte(spec), &cl.Spec); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	if err := json.Unmarshal([]byte(status), &cl.Status); err != nil {
		return nil, fmt.Errorf("decode status: %w", err)
	}
	return cl, nil
}

// GetCluster reads a cluster.
func (s *Store) GetCluster(ctx context.Context, k store.Key) (*store.Cluster, error) {
	cl, err := scanCluster(s.read.QueryRowContext(ctx, s.q(`SELECT `+clusterCols+` FROM clusters
		WHERE project = ? AND name = ?`), k.Project, k.Name))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get cluster %s: %w", k, err)
	}
	return cl, nil
}

// ListClusters lists a project's clusters by name.
func (s *Store) ListClusters(ctx context.Context, project string, pg store.Page) ([]*store.Cluster, string, error) {
	wrap := func(err error) error { return fmt.Errorf("list clusters %s: %w", project, err) }
	after, err := decodeToken(pg.Token)
	if err != nil {
		return nil, "", wrap(err)
	}
	out, next, err := queryPage(ctx, s, `SELECT `+clusterCols+` FROM clusters
		WHERE project = ? AND name > ? ORDER BY name LIMIT ?`, []any{project, after}, limitOf(pg),
		scanCluster, func(cl *store.Cluster) string { return cl.Name })
	if err != nil {
		return nil, "", wrap(err)
	}
	return out, next, nil
}

// ListClustersWhere lists the clusters of every project in f.State of
// f.Providers (nil: any), by project and name; see
// store.Store. The index clusters_provider serves it.
func (s *Store) ListClustersWhere(ctx context.Context, f store.ClusterFilter, pg store.Page) ([]*store.Cluster, string, error) {
	wrap := func(err error) error { return fmt.Errorf("list %s clusters: %w", f.State, err) }
	after, err := decodeToken(pg.Token)
	if err != nil {
		return nil, "", wrap(err)
	}
	afterProject, afterName, _ := strings.Cut(after, "/")
	where, args := `provisioning_state = ? AND (project, name) > (?, ?)`, []any{f.State, afterProject, afterName}
	if f.Providers != nil {
		if len(f.Providers) == 0 {
			return nil, "", nil // no provider: no cluster
		}
		where += ` AND provider IN (?` + strings.Repeat(", ?", len(f.Providers)-1) + `)`
		for _, p := range f.Providers {
			args = append(args, p)
		}
	}
	out, next, err := queryPage(ctx, s, `SELECT `+clusterCols+` FROM clusters
		WHERE `+where+` ORDER BY project, name LIMIT ?`, args, limitOf(pg),
		scanCluster, func(cl *store.Cluster) string { return cl.Project + "/" + cl.Name })
	if err != nil {
		return nil, "", wrap(err)
	}
	return out, next, nil
}

// BeginOperation writes the cluster and inserts op in one transaction; see
// store.Store. A replaced cluster keeps its lease token (tokens never go
// back) and its uid; a new one starts from the token its name last had, if
// any, with a new uid. op is filed under the cluster's uid.
func (s *Store) BeginOperation(ctx context.Context, cl *store.Cluster, op *store.Operation, c store.Cond) error {
	k := cl.Key()
	if err := s.beginOperation(ctx, cl, op, c); err != nil {
		return fmt.Errorf("begin operation on cluster %s: %w", k, err)
	}
	s.changed(operationChanged(op), store.Change{Kind: store.ChangeWork, Project: k.Project, Cluster: k.Name})
	return nil
}

func (s *Store) beginOperation(ctx context.Context, cl *store.Cluster, op *store.Operation, c store.Cond) error {
	k := cl.Key()
	if k.Project == "" || k.Name == "" || op.ID == "" {
		return errors.New("cluster project, name and operation id are required")
	}
	if c.Fence != nil {
		return errors.New("BeginOperation takes no fence")
	}
	if op.Project == "" && op.Cluster == "" {
		op.Project, op.Cluster = k.Project, k.Name
	}
	if op.Project != k.Project || op.Cluster != k.Name {
		return fmt.Errorf("operation %s is for cluster %s/%s", op.ID, op.Project, op.Cluster)
	}
	if op.StartTime.IsZero() {
		op.StartTime = s.now().UTC()
	}
	spec, err := json.Marshal(cl.Spec)
	if err != nil {
		return err
	}
	status, err := json.Marshal(cl.Status)
	if err != nil {
		return err
	}
	etag := newETag()
	var (
		token   int64
		uid     string
		auditID int64
	)
	for attempt := 0; ; attempt++ {
		err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			var oldETag, oldStatus, oldState string
			err := tx.QueryRowContext(ctx, s.q(`SELECT etag, status, provisioning_state, lease_token, uid FROM clusters
				WHERE project = ? AND name = ?`+s.d.ForUpdate), k.Project, k.Name).Scan(&oldETag, &oldStatus, &oldState, &token, &uid)
			exists := err == nil
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if err := checkCond(c, exists, oldETag); err != nil {
				return err
			}
			if exists && active(oldState) {
				return s.conflict(ctx, tx, k, uid, oldStatus, oldState)
			}
			if exists {
				_, err = tx.ExecContext(ctx, s.q(`UPDATE clusters SET etag = ?, spec = ?, provider = ?, kubernetes_version = ?, profile = ?,
					status = ?, provisioning_state = ?, lease_owner = '', lease_expiry = 0, dequeues = 0, lease_taken_from = ''
					WHERE project = ? AND name = ?`),
					etag, string(spec), cl.Spec.Provider, cl.Spec.KubernetesVersion, cl.Spec.Profile.Name,
					string(status), cl.Status.ProvisioningState, k.Project, k.Name)
				if err != nil {
					return err
				}
			} else {
				if uid, err = newUID(); err != nil {
					return err
				}
				if err := s.insertCluster(ctx, tx, k, uid, etag, string(spec), &cl.Spec, string(status), cl.Status.ProvisioningState, &token); err != nil {
					return err
				}
			}
			op.ClusterUID = uid
			if err := s.insertOperation(ctx, tx, op); err != nil {
				return err
			}
			if op.Audit == nil {
				return nil
			}
			auditID, err = s.insertAudit(ctx, tx, op.Audit)
			return err
		})
		if errors.Is(err, errRaced) && c.IfNoneMatch == "*" {
			err = store.ErrExists
		}
		if !errors.Is(err, errRaced) || attempt == 2 {
			break
		}
	}
	if err != nil {
		return err
	}
	cl.ETag = etag
	cl.UID = uid
	if op.Audit != nil {
		op.Audit.ID = strconv.FormatInt(auditID, 10)
	}
	cl.Lease = store.Lease{Token: token}
	cl.Dequeues = 0
	return nil
}

// conflict builds the *ConflictError for a cluster (k, uid) that is busy.
// The running operation is the one its status names or, failing that, the
// newest InProgress one recorded for it.
func (s *Store) conflict(ctx context.Context, tx *sql.Tx, k store.Key, uid, status, state string) error {
	var st v1.ClusterStatus
	_ = json.Unmarshal([]byte(status), &st) // best effort: the state column is authoritative
	opID := st.CurrentOperation
	if opID == "" {
		err := tx.QueryRowContext(ctx, s.q(`SELECT id FROM operations WHERE project = ? AND cluster = ? AND cluster_uid = ?
			AND status = ? ORDER BY id DESC LIMIT 1`), k.Project, k.Name, uid, v1.OpInProgress).Scan(&opID)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
	}
	return &store.ConflictError{Operation: opID, State: state}
}

// newUID is a new cluster's identity: a UUIDv7.
func newUID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new cluster uid: %w", err)
	}
	return id.String(), nil
}

func (s *Store) insertCluster(ctx context.Context, tx *sql.Tx, k store.Key, uid, etag, spec string, sp *v1.ClusterSpec, status, state string, token *int64) error {
	err := tx.QueryRowContext(ctx, s.q(`SELECT lease_token FROM lease_tombstones WHERE project = ? AND name = ?`),
		k.Project, k.Name).Scan(token)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	_, err = tx.ExecContext(ctx, s.q(`INSERT INTO clusters (project, name, etag, spec, provider, kubernetes_version, profile, status,
		provisioning_state, lease_owner, lease_token, lease_expiry, dequeues, uid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '', ?, 0, 0, ?)`),
		k.Project, k.Name, etag, spec, sp.Provider, sp.KubernetesVersion, sp.Profile.Name, status, state, *token, uid)
	switch s.constraint(err) {
	case ForeignKey:
		return fmt.Errorf("project %s: %w", k.Project, store.ErrNotFound)
	case Unique:
		return errRaced
	}
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, s.q(`DELETE FROM lease_tombstones WHERE project = ? AND name = ?`), k.Project, k.Name)
	return err
}

// PutClusterStatus writes cl.Status, fenced by c.Fence and honouring
// c.IfMatch. Without a fence it needs c.IfMatch (an etag) and a cluster no
// worker may lease (no operation running): the health checker writes the
// conditions of idle clusters that way. cl.ETag is set to the new etag.
func (s *Store) PutClusterStatus(ctx context.Context, cl *store.Cluster, c store.Cond) error {
	k := cl.Key()
	wrap := func(err error) error { return fmt.Errorf("put status of cluster %s: %w", k, err) }
	if c.Fence == nil && (c.IfMatch == "" || c.IfMatch == "*") {
		return wrap(errors.New("a fence or an etag to match is required"))
	}
	if c.IfNoneMatch == "*" {
		return wrap(store.ErrExists) // the fence or the etag proves the cluster exists
	}
	status, err := json.Marshal(cl.Status)
	if err != nil {
		return wrap(err)
	}
	etag := newETag()
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if c.Fence != nil {
			if err := s.checkFence(ctx, tx, k, *c.Fence); err != nil {
				return err
			}
		}
		if c.IfMatch != "" && c.IfMatch != "*" {
			var old, state string
			err := tx.QueryRowContext(ctx, s.q(`SELECT etag, provisioning_state FROM clusters WHERE project = ? AND name = ?`),
				k.Project, k.Name).Scan(&old, &state)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return store.ErrNotFound
			case err != nil:
				return err
			case old != c.IfMatch:
				return store.ErrPreconditionFailed
			case c.Fence == nil && active(state):
				// A worker may hold its lease: only it writes the status.
				return store.ErrPreconditionFailed
			}
		}
		_, err := tx.ExecContext(ctx, s.q(`UPDATE clusters SET etag = ?, status = ?, provisioning_state = ?
			WHERE project = ? AND name = ?`), etag, string(status), cl.Status.ProvisioningState, k.Project, k.Name)
		return err
	})
	if err != nil {
		return wrap(err)
	}
	cl.ETag = etag
	return nil
}
