package server

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// nodeLogs lists the log lines a node's agent sent, oldest first, paged. A
// log grows, so the nextLink is always there: where to read on from.
// ?component= (repeatable, or comma-separated) keeps the lines of those
// streams, ?since= (RFC 3339) those at or after a time, ?tail=N starts at
// the newest N that match; ?wait= long-polls while there is nothing new
// that matches.
func (s *Server) nodeLogs(w http.ResponseWriter, r *http.Request) error {
	pg, err := page(r)
	if err != nil {
		return err
	}
	f, wait, err := logQuery(r)
	if err != nil {
		return err
	}
	if err := s.requireCluster(r); err != nil {
		return err
	}
	k, name := clusterKey(r), r.PathValue("node")
	if _, err := s.nodes.GetNode(r.Context(), k, name); err != nil {
		return toAPIError(err, refOf(r, "node"))
	}
	lines, next, err := s.nodes.ListNodeLogs(r.Context(), k, name, f, pg)
	if err == nil && len(lines) == 0 && wait > 0 {
		lines, next, err = s.waitLogs(r, k, name, f, store.Page{Limit: pg.Limit, Token: next}, wait)
	}
	if err != nil {
		return err
	}
	if lines == nil {
		lines = []v1.LogLine{}
	}
	// The position carries the tail from here on.
	writeJSON(w, http.StatusOK, v1.List[v1.LogLine]{Value: lines, NextLink: nextLink(r, pg, next, "tail")})
	return nil
}

// waitLogs reads the log from pg's position every PollInterval until there
// are lines that match, the wait is over or the server stops.
func (s *Server) waitLogs(r *http.Request, k store.Key, node string, f store.LogFilter, pg store.Page, wait time.Duration) ([]v1.LogLine, string, error) {
	ctx := r.Context()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	for {
		if s.waitHook != nil {
			s.waitHook(r.URL.Path)
		}
		select {
		case <-ctx.Done():
			return nil, pg.Token, ctx.Err()
		case <-deadline.C:
			return nil, pg.Token, nil
		case <-s.stopping:
			return nil, pg.Token, nil
		case <-tick.C:
		}
		lines, next, err := s.nodes.ListNodeLogs(ctx, k, node, f, pg)
		if err != nil || len(lines) > 0 {
			return lines, next, err
		}
		pg.Token = next
	}
}

// componentRE is a log stream's name: agent, etcd, controller-manager, ...
var componentRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// logQuery reads the filters and the wait of a node log request.
func logQuery(r *http.Request) (store.LogFilter, time.Duration, error) {
	q := r.URL.Query()
	var f store.LogFilter
	for _, v := range q["component"] {
		for c := range strings.SplitSeq(v, ",") {
			if !componentRE.MatchString(c) {
				return f, 0, badRequest("component", "component %q is not a component's name such as agent, etcd, apiserver, controller-manager, scheduler or kubelet", c)
			}
			f.Streams = append(f.Streams, c)
		}
	}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return f, 0, badRequest("since", "since must be an RFC 3339 time such as 2026-11-21T10:00:00Z")
		}
		f.Since = t
	}
	if v := q.Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxNodeLogLines {
			return f, 0, badRequest("tail", "tail must be an integer from 1 to %d (the lines kept)", store.MaxNodeLogLines)
		}
		f.Tail = n
	}
	wait, err := waitParam(r)
	return f, wait, err
}

// waitParam reads a long-poll's ?wait=, at most MaxWait; 0 without one.
func waitParam(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxWait {
		return 0, badRequest("wait", "wait must be a duration from 0s to %s, such as 30s", MaxWait)
	}
	return d, nil
}
