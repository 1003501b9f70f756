package server

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// approveNode lets a DISCOVERED node go on (POST .../nodes/{node}/approve).
// Approving a node that is approved already, or further along, changes
// nothing and answers 200.
func (s *Server) approveNode(w http.ResponseWriter, r *http.Request) error {
	return s.changeNode(w, r, "NodeApproved", func(n *store.Node) (bool, error) {
		switch n.State {
		case v1.NodeDiscovered:
			n.State, n.Message = v1.NodeApproved, ""
			return true, nil
		case v1.NodeApproved, v1.NodeConfigured, v1.NodeProvisioning, v1.NodeReady, v1.NodeNotReady:
			return false, nil
		case v1.NodePrecheckFailed:
			return false, conflict(refOf(r, "node"), "node",
				"failed prechecks (%s): fix the host and run the agent again", failedChecks(n))
		default:
			return false, conflict(refOf(r, "node"), "node", "is %s and cannot be approved", n.State)
		}
	})
}

// configureNode gives an approved node its role, network interface and
// storage devices (POST .../nodes/{node}/configure). The interface and
// devices must be among those the node reported.
func (s *Server) configureNode(w http.ResponseWriter, r *http.Request) error {
	b, err := readBody(r)
	if err != nil {
		return err
	}
	var cfg v1.NodeConfig
	if err := decodeStrict(b, &cfg); err != nil {
		return err
	}
	if cfg.Role != v1.RoleControlPlane && cfg.Role != v1.RoleWorker {
		return badRequest("role", "role must be %s or %s", v1.RoleControlPlane, v1.RoleWorker)
	}
	return s.changeNode(w, r, "NodeConfigured", func(n *store.Node) (bool, error) {
		switch n.State {
		case v1.NodeApproved, v1.NodeConfigured:
		case v1.NodeDiscovered:
			return false, conflict(refOf(r, "node"), "node", "is %s: approve the node before configuring it", n.State)
		default:
			return false, conflict(refOf(r, "node"), "node",
				"is %s and cannot be configured: its role is set once, before it is provisioned", n.State)
		}
		if err := checkReported(n, cfg); err != nil {
			return false, err
		}
		n.Role, n.Interface, n.StorageDevices = cfg.Role, cfg.Interface, cfg.StorageDevices
		n.State, n.Message = v1.NodeConfigured, ""
		return true, nil
	})
}

// checkReported refuses an interface or device the node did not report.
func checkReported(n *store.Node, cfg v1.NodeConfig) error {
	var ifaces, disks []string
	if n.Facts != nil {
		for _, i := range n.Facts.Interfaces {
			ifaces = append(ifaces, i.Name)
		}
		for _, d := range n.Facts.Disks {
			disks = append(disks, d.Path)
		}
	}
	if cfg.Interface != "" && !slices.Contains(ifaces, cfg.Interface) {
		return badRequest("interface", "the node reported no interface %q; it has: %s", cfg.Interface, orNone(ifaces))
	}
	for i, d := range cfg.StorageDevices {
		if !slices.Contains(disks, d) {
			return badRequest(fmt.Sprintf("storageDevices[%d]", i), "the node reported no device %q; it has: %s", d, orNone(disks))
		}
	}
	return nil
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func failedChecks(n *store.Node) string {
	var names []string
	for _, p := range n.Prechecks {
		if p.Result == v1.PrecheckFail {
			names = append(names, p.Name)
		}
	}
	return orNone(names)
}

// changeNode reads a node, lets change edit it, and writes it back
// conditional on the etag it read (another writer in between makes it read
// again). change reports whether it changed anything; an unchanged node is
// not written. The answer is the node as it now is.
func (s *Server) changeNode(w http.ResponseWriter, r *http.Request, reason string, change func(*store.Node) (bool, error)) error {
	if err := s.requireCluster(r); err != nil {
		return err
	}
	k, name := clusterKey(r), r.PathValue("node")
	for range attempts(r.Context()) {
		n, err := s.nodes.GetNode(r.Context(), k, name)
		if err != nil {
			return err
		}
		changed, err := change(n)
		if err != nil {
			return err
		}
		if changed {
			err = s.nodes.PutNode(r.Context(), n, store.Cond{IfMatch: n.ETag})
			if errors.Is(err, store.ErrPreconditionFailed) {
				continue
			}
			if err != nil {
				return err
			}
			ev := &store.Event{Project: k.Project, Cluster: k.Name, Event: v1.Event{Type: "Normal", Reason: reason, Node: name,
				Message: fmt.Sprintf("node %s is %s (by %s)", name, n.State, info(r.Context()).principal.Name)}}
			if err := s.events.AppendEvent(r.Context(), ev); err != nil {
				s.log.WarnContext(r.Context(), "could not append event", "reason", reason, "err", err)
			}
		}
		w.Header().Set("ETag", quoteETag(n.ETag))
		writeJSON(w, http.StatusOK, nodeOut(n))
		return nil
	}
	return errBusy(refOf(r, "node"))
}
