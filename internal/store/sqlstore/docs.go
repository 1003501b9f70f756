package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"kiln.dev/kiln/internal/store"
)

// docTable is a table of JSON documents with an etag and a created time,
// keyed by zero or more parent columns and a name: projects, cloud accounts,
// project secrets, profiles and nodes share their put/get/list/delete code through it.
type docTable struct {
	table  string
	kind   string   // for error messages
	parent []string // key columns before name; nodes: project, cluster
	// fenced: the parent is a cluster, whose lease Cond.Fence names.
	fenced bool
	// sealed, when set, is the data column as a sealed column: the whole
	// document is sealed (cloud accounts: the credentials are in it;
	// project secrets: their data).
	sealed *sealedColumn
	// columns, when set, gives the fields of a document (what putDoc was
	// given) that are also kept in columns of their own, for queries that
	// must not decode every document; written with every put.
	columns func(v any) (names []string, values []any)
}

var (
	projectsT = docTable{table: "projects", kind: "project"}
	accountsT = docTable{table: "cloud_accounts", kind: "cloud account", parent: []string{"project"}, sealed: &accountsCol}
	profilesT = docTable{table: "profiles", kind: "profile", parent: []string{"project"}}
	nodesT    = docTable{table: "nodes", kind: "node", parent: []string{"project", "cluster"}, fenced: true, columns: nodeColumns}
	jobsT     = docTable{table: "jobs", kind: "job", parent: []string{"project", "cluster"}}

	projectSecretsT = docTable{table: "project_secrets", kind: "secret", parent: []string{"project"}, sealed: &projectSecretsCol}
)

// doc is one row of a docTable.
type doc struct {
	name    string
	etag    string
	created time.Time
	data    []byte
}

func (t docTable) parentWhere() string {
	var b strings.Builder
	for _, c := range t.parent {
		b.WriteString(c + " = ? AND ")
	}
	return b.String()
}

func (t docTable) keyWhere() string { return t.parentWhere() + "name = ?" }

func keyArgs(parent []string, name string) []any {
	args := make([]any, 0, len(parent)+1)
	for _, p := range parent {
		args = append(args, p)
	}
	return append(args, name)
}

// keyParts is a document's primary key: its parent columns' values, then
// its name.
func keyParts(parent []string, name string) []string {
	return append(append([]string(nil), parent...), name)
}

func path(parent []string, name string) string {
	return strings.Join(keyParts(parent, name), "/")
}

// putDoc creates or replaces a document. It returns the new etag and the
// created time (kept from the stored record on replace; created, or now,
// when the record is new).
func (s *Store) putDoc(ctx context.Context, t docTable, parent []string, name string, created time.Time, v any, c store.Cond, events ...*store.Event) (string, time.Time, error) {
	p := path(parent, name)
	if name == "" {
		return "", time.Time{}, fmt.Errorf("put %s %s: empty name", t.kind, p)
	}
	if c.Fence != nil && !t.fenced {
		return "", time.Time{}, fmt.Errorf("put %s %s: a fence applies only to cluster records", t.kind, p)
	}
	data, err := json.Marshal(v)
	if err == nil && t.sealed != nil {
		data, err = s.seal(*t.sealed, data, keyParts(parent, name)...)
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("put %s %s: %w", t.kind, p, err)
	}
	var xcols []string
	var xargs []any
	if t.columns != nil {
		xcols, xargs = t.columns(v)
	}
	etag := newETag()
	var createdAt int64
	for attempt := 0; ; attempt++ {
		err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if c.Fence != nil {
				if err := s.checkFence(ctx, tx, store.Key{Project: parent[0], Name: parent[1]}, *c.Fence); err != nil {
					return err
				}
			}
			var old string
			err := tx.QueryRowContext(ctx, s.q(`SELECT etag, created_at FROM `+t.table+` WHERE `+t.keyWhere()+s.d.ForUpdate),
				keyArgs(parent, name)...).Scan(&old, &createdAt)
			exists := err == nil
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if err := checkCond(c, exists, old); err != nil {
				return err
			}
			if exists {
				set := "etag = ?, data = ?"
				for _, c := range xcols {
					set += ", " + c + " = ?"
				}
				args := append(append([]any{etag, string(data)}, xargs...), keyArgs(parent, name)...)
				if _, err = tx.ExecContext(ctx, s.q(`UPDATE `+t.table+` SET `+set+` WHERE `+t.keyWhere()), args...); err != nil {
					return err
				}
				return s.insertEvents(ctx, tx, "", events)
			}
			createdAt = toNanos(created)
			if createdAt == 0 {
				createdAt = s.nowNanos()
			}
			cols := append(append(append([]string(nil), t.parent...), "name", "etag", "created_at", "data"), xcols...)
			args := append(append(keyArgs(parent, name), etag, createdAt, string(data)), xargs...)
			_, err = tx.ExecContext(ctx, s.q(`INSERT INTO `+t.table+` (`+strings.Join(cols, ", ")+`)
				VALUES (?`+strings.Repeat(", ?", len(cols)-1)+`)`), args...)
			switch s.constraint(err) {
			case ForeignKey:
				return fmt.Errorf("%s %s: %w", t.parentKind(), strings.Join(parent, "/"), store.ErrNotFound)
			case Unique:
				return errRaced
			}
			if err != nil {
				return err
			}
			return s.insertEvents(ctx, tx, "", events)
		})
		// Two writers both found no record and both inserted: the loser
		// tries again and now sees the winner's record.
		if errors.Is(err, errRaced) && c.IfNoneMatch == "*" {
			err = store.ErrExists
		}
		if !errors.Is(err, errRaced) || attempt == 2 {
			break
		}
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("put %s %s: %w", t.kind, p, err)
	}
	return etag, fromNanos(createdAt), nil
}

var errRaced = errors.New("concurrent insert")

func (t docTable) parentKind() string {
	if t.fenced || len(t.parent) == 2 {
		return "cluster"
	}
	return "project"
}

func (s *Store) getDoc(ctx context.Context, t docTable, parent []string, name string) (doc, error) {
	d := doc{name: name}
	var created int64
	err := s.read.QueryRowContext(ctx, s.q(`SELECT etag, created_at, data FROM `+t.table+` WHERE `+t.keyWhere()),
		keyArgs(parent, name)...).Scan(&d.etag, &created, &d.data)
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err == nil {
		d.data, err = s.openDoc(t, parent, d)
	}
	if err != nil {
		return doc{}, fmt.Errorf("get %s %s: %w", t.kind, path(parent, name), err)
	}
	d.created = fromNanos(created)
	return d, nil
}

// openDoc returns d's data, opened if t is sealed.
func (s *Store) openDoc(t docTable, parent []string, d doc) ([]byte, error) {
	if t.sealed == nil {
		return d.data, nil
	}
	return s.open(*t.sealed, d.data, keyParts(parent, d.name)...)
}

func (s *Store) listDocs(ctx context.Context, t docTable, parent []string, pg store.Page) ([]doc, string, error) {
	wrap := func(err error) error { return fmt.Errorf("list %ss %s: %w", t.kind, path(parent, ""), err) }
	after, err := decodeToken(pg.Token)
	if err != nil {
		return nil, "", wrap(err)
	}
	scan := func(r scanner) (doc, error) {
		var d doc
		var created int64
		err := r.Scan(&d.name, &d.etag, &created, &d.data)
		d.created = fromNanos(created)
		return d, err
	}
	out, next, err := queryPage(ctx, s, `SELECT name, etag, created_at, data FROM `+t.table+`
		WHERE `+t.parentWhere()+`name > ? ORDER BY name LIMIT ?`, keyArgs(parent, after), limitOf(pg),
		scan, func(d doc) string { return d.name })
	if err != nil {
		return nil, "", wrap(err)
	}
	for i := range out {
		if out[i].data, err = s.openDoc(t, parent, out[i]); err != nil {
			return nil, "", wrap(err)
		}
	}
	return out, next, nil
}

// deleteDoc deletes a document; a missing one is ErrNotFound whatever c says.
// also runs in the same transaction, before the delete, to delete what goes
// with the document.
func (s *Store) deleteDoc(ctx context.Context, t docTable, parent []string, name string, c store.Cond, also ...func(context.Context, *sql.Tx) error) error {
	p := path(parent, name)
	if c.Fence != nil && !t.fenced {
		return fmt.Errorf("delete %s %s: a fence applies only to cluster records", t.kind, p)
	}
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if c.Fence != nil {
			if err := s.checkFence(ctx, tx, store.Key{Project: parent[0], Name: parent[1]}, *c.Fence); err != nil {
				return err
			}
		}
		var etag string
		err := tx.QueryRowContext(ctx, s.q(`SELECT etag FROM `+t.table+` WHERE `+t.keyWhere()+s.d.ForUpdate),
			keyArgs(parent, name)...).Scan(&etag)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := checkCond(c, true, etag); err != nil {
			return err
		}
		for _, f := range also {
			if err := f(ctx, tx); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, s.q(`DELETE FROM `+t.table+` WHERE `+t.keyWhere()), keyArgs(parent, name)...)
		if s.constraint(err) == ForeignKey {
			// Only projects have restricting children: their clusters.
			return store.ErrNotEmpty
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", t.kind, p, err)
	}
	return nil
}

// decodeDoc unmarshals d's data into v.
func decodeDoc(t docTable, d doc, v any) error {
	if err := json.Unmarshal(d.data, v); err != nil {
		return fmt.Errorf("decode %s %s: %w", t.kind, d.name, err)
	}
	return nil
}
