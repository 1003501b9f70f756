package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// Live pages follow a cluster (or a node's log) over server-sent events: the
// page's script opens an EventSource on the page's /live address and swaps
// in each fragment of HTML the server sends, rendered by the same templates
// as the page. A fragment is sent only when it changed. While an operation
// runs, the stream waits on the API's long-poll of that operation, so a step
// shows the moment it changes; otherwise it re-reads every LiveInterval.
//
// Events: "fragments" (a JSON object, fragment name to HTML), "lines" (a
// JSON array of log lines), "gone" (the cluster or node no longer exists;
// the data says so) and "signedout".

// keepAlive is how long a stream may stay silent: a comment goes out then,
// so that proxies and the browser keep it open.
const keepAlive = 15 * time.Second

// stream is one server-sent events answer.
type stream struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	last time.Time
}

func newStream(w http.ResponseWriter) *stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &stream{w: w, rc: http.NewResponseController(w)}
	s.flush()
	return s
}

// send writes one event; data is JSON-encoded (one line).
func (s *stream) send(event string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	// The server's WriteTimeout is for ordinary answers; a stream lives on
	// as long as each write goes through.
	_ = s.rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	s.last = time.Now()
	return s.flush()
}

// ping keeps a quiet stream open.
func (s *stream) ping() error {
	if time.Since(s.last) < keepAlive {
		return nil
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprint(s.w, ": ping\n\n"); err != nil {
		return err
	}
	s.last = time.Now()
	return s.flush()
}

func (s *stream) flush() error {
	err := s.rc.Flush()
	if err == http.ErrNotSupported {
		return nil
	}
	return err
}

// streams tracks the open streams, so that Stop can end them.
type streams struct {
	once sync.Once
	stop chan struct{} // closed by Stop
}

// Stop ends every live stream, now and later (the browser is told to
// reconnect, and will find the next kilnd). Call it before
// http.Server.Shutdown, which otherwise waits for them.
func (c *Console) Stop() { c.streams.once.Do(func() { close(c.streams.stop) }) }

// liveContext is r's context, also ended by Stop.
func (c *Console) liveContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	go func() {
		select {
		case <-c.streams.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// clustersLive streams the clusters list (with the page's q, project,
// filters and sort), re-read every LiveInterval.
func (c *Console) clustersLive(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.pollFragment(w, r, s, "clusters.html", "clusters", func(ctx context.Context) (any, error) {
		return c.loadClusters(ctx, r, s, r.URL.Query())
	})
}

// pollFragment streams one fragment of a page, its data read by load
// every LiveInterval and sent when its HTML changed.
func (c *Console) pollFragment(w http.ResponseWriter, r *http.Request, s *session, pageName, name string, load func(context.Context) (any, error)) error {
	ctx, cancel := c.liveContext(r)
	defer cancel()
	st := newStream(w)
	var sent string
	for {
		v, err := load(ctx)
		if c.streamError(st, err, "") {
			return nil
		}
		html, err := c.fragment(pageName, name, page{Session: s, Data: v})
		if err != nil {
			c.log.ErrorContext(ctx, "console fragment failed", "fragment", name, "err", err)
			return nil
		}
		if html != sent {
			sent = html
			if st.send("fragments", map[string]string{name: html}) != nil {
				return nil
			}
		} else if st.ping() != nil {
			return nil
		}
		if !sleep(ctx, c.live) {
			return nil
		}
	}
}

// liveFragments are the parts of each view that a stream keeps current.
var liveFragments = map[string][]string{
	"overview": {"kubeconfig", "status", "current", "current-timeline", "current-steps", "past", "pools", "events", "add-pool-button", "upgrade-button"},
	"nodes":    {"nodes"},
}

// clusterLive streams a cluster page's fragments (?view=overview or nodes,
// with the nodes tab's q and sort).
func (c *Console) clusterLive(w http.ResponseWriter, r *http.Request, s *session) error {
	view := r.URL.Query().Get("view")
	names, ok := liveFragments[view]
	if !ok {
		return &client.APIError{StatusCode: http.StatusBadRequest, Err: v1.Error{Code: v1.CodeInvalidParameter, Target: "view",
			Message: "view must be overview or nodes"}}
	}
	ctx, cancel := c.liveContext(r)
	defer cancel()
	st := newStream(w)
	sent := map[string]string{}
	var etag string // of the running operation as last seen
	for {
		v, err := c.loadCluster(ctx, r, s, view == "overview")
		if ended := c.streamError(st, err, "The cluster no longer exists."); ended {
			return nil
		}
		if view == "nodes" {
			filterNodes(v, r.URL.Query())
		}
		p := page{Session: s, Project: v.Project, Cluster: v.Cluster.Name, Data: v}
		out := map[string]string{}
		for _, name := range names {
			html, err := c.fragment("cluster.html", name, p)
			if err != nil {
				c.log.ErrorContext(ctx, "console fragment failed", "fragment", name, "err", err)
				return nil
			}
			if sent[name] != html {
				out[name], sent[name] = html, html
			}
		}
		if len(out) > 0 {
			if st.send("fragments", out) != nil {
				return nil
			}
		} else if st.ping() != nil {
			return nil
		}
		if v.Current != nil && v.Current.Status == v1.OpInProgress {
			etag = c.waitOperation(ctx, r, s, v.Current.ID, etag)
		} else if !sleep(ctx, c.live) {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// waitOperation long-polls the operation until it changes from etag, at
// most LiveInterval, and returns its new ETag.
func (c *Console) waitOperation(ctx context.Context, r *http.Request, s *session, id, etag string) string {
	h := http.Header{}
	if etag != "" {
		h.Set("If-None-Match", etag)
	}
	path := "/v1/operations/" + url.PathEscape(id) + "?wait=" + c.live.String()
	got, err := c.call(ctx, r, s.token, http.MethodGet, path, h, nil)
	if err != nil {
		sleep(ctx, c.live) // the next read says what is wrong
		return ""
	}
	return got.Get("ETag")
}

// streamError ends a stream on err, telling the page why; it reports
// whether the stream ended.
func (c *Console) streamError(st *stream, err error, goneMsg string) bool {
	if err == nil {
		return false
	}
	if ae, ok := apiError(err); ok {
		switch ae.StatusCode {
		case http.StatusNotFound:
			_ = st.send("gone", goneMsg)
			return true
		case http.StatusUnauthorized:
			_ = st.send("signedout", "Your session ended; sign in again.")
			return true
		}
	}
	// Anything else (the store unreachable, this kilnd stopping): the
	// browser reconnects and the next stream tries again.
	return true
}

// fragment renders one named template of a page.
func (c *Console) fragment(pageName, name string, p page) (string, error) {
	var b strings.Builder
	if err := c.pages[pageName].ExecuteTemplate(&b, name, p); err != nil {
		return "", err
	}
	return b.String(), nil
}

// maxLogBatch is the most log lines one event carries.
const maxLogBatch = 500

// nodeLogsLive streams a node's log from its start (the lines kept), then
// each line as it arrives, and the node's summary when it changes.
func (c *Console) nodeLogsLive(w http.ResponseWriter, r *http.Request, s *session) error {
	project, cluster, node := r.PathValue("project"), r.PathValue("cluster"), r.PathValue("node")
	ctx, cancel := c.liveContext(r)
	defer cancel()
	api := c.client(r, s.token)
	st := newStream(w)
	var (
		lastNode string
		lastRead time.Time
	)
	q := parseLogFilter(r.URL.Query()).query(time.Now())
	for {
		lines, next, err := api.ReadNodeLogs(ctx, project, cluster, node, q)
		if c.streamError(st, err, "The node no longer exists.") {
			return nil
		}
		q.From = next
		for len(lines) > 0 {
			batch := lines[:min(len(lines), maxLogBatch)]
			lines = lines[len(batch):]
			if st.send("lines", batch) != nil {
				return nil
			}
		}
		if time.Since(lastRead) >= c.live {
			lastRead = time.Now()
			v, err := c.loadNode(ctx, r, s)
			if c.streamError(st, err, "The node no longer exists.") {
				return nil
			}
			html, err := c.fragment("node.html", "node", page{Session: s, Project: project, Cluster: cluster, Data: v})
			if err != nil {
				c.log.ErrorContext(ctx, "console fragment failed", "fragment", "node", "err", err)
				return nil
			}
			if html != lastNode {
				lastNode = html
				if st.send("fragments", map[string]string{"node": html}) != nil {
					return nil
				}
			}
		}
		if st.ping() != nil || !sleep(ctx, logPoll) {
			return nil
		}
	}
}

// logPoll is how often a node's log stream reads new lines.
const logPoll = time.Second

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
