package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/store"
)

// MaxSnapshot is the largest snapshot an agent may upload: etcd's
// largest backend quota (8 GiB).
const MaxSnapshot = 8 << 30

// NodeVerifier says which node of which cluster a request on the agent
// listener comes from, by its client certificate (gateway.VerifyNode).
type NodeVerifier interface {
	VerifyNode(r *http.Request) (store.Key, string, error)
}

// InstructionReader finds a node's instructions and its cluster.
type InstructionReader interface {
	ListInstructions(ctx context.Context, k store.Key, node string, pending bool) ([]*store.Instruction, error)
	GetCluster(ctx context.Context, k store.Key) (*store.Cluster, error)
}

// Handler serves v1.AgentSnapshotPath+ID on the agent listener: PUT, the
// snapshot of node's pending etcd-snapshot instruction ID, sealed into its
// backup's object; GET, the snapshot of node's pending etcd-restore
// instruction ID, unsealed. Only the node the instruction is for, by its
// certificate, and only while the instruction has no result.
type Handler struct {
	Vault        *Vault
	Nodes        NodeVerifier
	Instructions InstructionReader
	Logger       *slog.Logger
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, v1.AgentSnapshotPath)
	k, node, err := h.Nodes.VerifyNode(r)
	if err != nil {
		if errors.Is(err, auth.ErrUnauthenticated) {
			writeError(w, http.StatusUnauthorized, v1.CodeUnauthorized, "%v", err)
			return
		}
		h.internal(w, "verify node", err)
		return
	}
	in, err := h.pending(r.Context(), k, node, id)
	if err != nil {
		h.internal(w, "read instructions", err)
		return
	}
	if in == nil {
		writeError(w, http.StatusNotFound, v1.CodeNotFound, "node %s has no pending instruction %q", node, id)
		return
	}
	switch {
	case r.Method == http.MethodPut && in.Kind == v1.InstructionEtcdSnapshot:
		h.upload(w, r, k, node, in)
	case r.Method == http.MethodGet && in.Kind == v1.InstructionEtcdRestore:
		h.download(w, r, k, node, in)
	default:
		writeError(w, http.StatusMethodNotAllowed, v1.CodeMethodNotAllowed,
			"%s of instruction %s (%s): a snapshot is PUT for an etcd-snapshot instruction and read with GET for an etcd-restore one", r.Method, id, in.Kind)
	}
}

// pending is node's instruction id when it has no result yet.
func (h *Handler) pending(ctx context.Context, k store.Key, node, id string) (*store.Instruction, error) {
	ins, err := h.Instructions.ListInstructions(ctx, k, node, true)
	if err != nil {
		return nil, err
	}
	for _, in := range ins {
		if in.ID == id {
			return in, nil
		}
	}
	return nil, nil
}

func (h *Handler) upload(w http.ResponseWriter, r *http.Request, k store.Key, node string, in *store.Instruction) {
	ctx := r.Context()
	p, err := params[v1.EtcdSnapshotParams](in)
	if err != nil {
		writeError(w, http.StatusBadRequest, v1.CodeInvalidParameter, "instruction %s has params that are not an etcd-snapshot's: %v", in.ID, err)
		return
	}
	b, err := h.Vault.Store.GetBackup(ctx, k.Project, k.Name, p.Backup)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, v1.CodeNotFound, "backup %s of cluster %s does not exist", p.Backup, k.Name)
		return
	case err != nil:
		h.internal(w, "read backup", err)
		return
	case b.State != v1.BackupCreating || b.Node != node:
		writeError(w, http.StatusConflict, v1.CodeConflict, "backup %s is %s, taken on node %q: it takes no snapshot from node %s", b.Name, b.State, b.Node, node)
		return
	}
	want := r.Header.Get(SHA256Header)
	if r.ContentLength > MaxSnapshot {
		writeError(w, http.StatusRequestEntityTooLarge, v1.CodeInvalidParameter, "a snapshot of %d bytes is larger than the %d Kiln keeps", r.ContentLength, int64(MaxSnapshot))
		return
	}
	got, err := h.Vault.Write(ctx, b, http.MaxBytesReader(w, r.Body, MaxSnapshot))
	if err != nil {
		h.Logger.Warn("snapshot upload failed", "backup", b.Name, "node", node, "err", err)
		writeError(w, http.StatusServiceUnavailable, v1.CodeUnavailable, "%v", err)
		return
	}
	if (want != "" && got.SHA256 != want) || (r.ContentLength >= 0 && got.Size != r.ContentLength) {
		// Cut or changed on the way: the agent sends it again.
		_ = h.Vault.Delete(ctx, b)
		writeError(w, http.StatusServiceUnavailable, v1.CodeUnavailable,
			"the snapshot arrived as %d bytes of sha256 %s, the agent sent %d of %s: upload it again", got.Size, got.SHA256, r.ContentLength, want)
		return
	}
	h.Logger.Info("snapshot stored", "backup", b.Name, "node", node, "bytes", got.Size)
	w.Header().Set(SHA256Header, got.SHA256)
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) download(w http.ResponseWriter, r *http.Request, k store.Key, node string, in *store.Instruction) {
	ctx := r.Context()
	p, err := params[v1.EtcdRestoreParams](in)
	if err != nil {
		writeError(w, http.StatusBadRequest, v1.CodeInvalidParameter, "instruction %s has params that are not an etcd-restore's: %v", in.ID, err)
		return
	}
	of := p.Cluster
	if of == "" {
		of = k.Name
	}
	if of != k.Name {
		// A cluster made from another's backup reads that backup only.
		cl, err := h.Instructions.GetCluster(ctx, k)
		if err != nil {
			h.internal(w, "read cluster", err)
			return
		}
		if rf := cl.Spec.RestoreFrom; rf == nil || rf.Cluster != of || rf.Backup != p.Backup {
			writeError(w, http.StatusForbidden, v1.CodeForbidden, "cluster %s is not made from backup %s of cluster %s", k.Name, p.Backup, of)
			return
		}
	}
	b, err := h.Vault.Store.GetBackup(ctx, k.Project, of, p.Backup)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, v1.CodeNotFound, "backup %s of cluster %s does not exist", p.Backup, of)
		return
	case err != nil:
		h.internal(w, "read backup", err)
		return
	case b.State != v1.BackupSucceeded:
		writeError(w, http.StatusConflict, v1.CodeConflict, "backup %s is %s: only a Succeeded backup is restored", b.Name, b.State)
		return
	}
	rc, err := h.Vault.Read(ctx, b)
	if err != nil {
		h.Logger.Warn("snapshot download failed", "backup", b.Name, "node", node, "err", err)
		writeError(w, http.StatusServiceUnavailable, v1.CodeUnavailable, "%v", err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(b.Size, 10))
	w.Header().Set(SHA256Header, b.SHA256)
	if _, err := io.Copy(w, rc); err != nil {
		// The agent sees a short body and checks the digest anyway.
		h.Logger.Warn("snapshot download cut short", "backup", b.Name, "node", node, "err", err)
	}
}

// SHA256Header carries the hex sha256 of a snapshot uploaded or downloaded.
const SHA256Header = "X-Kiln-Snapshot-Sha256"

func (h *Handler) internal(w http.ResponseWriter, what string, err error) {
	h.Logger.Error("snapshot request failed", "what", what, "err", err)
	writeError(w, http.StatusInternalServerError, v1.CodeInternal, "internal error")
}

func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v1.ErrorResponse{Error: v1.Error{Code: code, Message: fmt.Sprintf(format, args...)}})
}
