package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/testlog"
)

// opStates is a create operation as a poller sees it, one state per poll.
func opStates() []*v1.Operation {
	mk := func(status string, pct int, end *time.Time, steps ...v1.Step) *v1.Operation {
		return &v1.Operation{ID: "/v1/operations/op1", Name: "op1", Status: status, StartTime: t0, EndTime: end,
			PercentComplete: pct,
			Properties:      v1.OperationProperties{Kind: v1.KindCreate, Target: "/v1/projects/default/clusters/dev", Steps: steps}}
	}
	pending := func(n string) v1.Step { return v1.Step{Name: n, State: v1.StepPending} }
	running := func(n string, att int, start time.Duration) v1.Step {
		return v1.Step{Name: n, State: v1.StepRunning, Attempts: att, StartTime: at(start)}
	}
	ended := func(n, state string, att int, start, end time.Duration, msg string) v1.Step {
		return v1.Step{Name: n, State: state, Attempts: att, StartTime: at(start), EndTime: at(end), Message: msg}
	}
	return []*v1.Operation{
		mk(v1.OpInProgress, 0, nil, running("validate-dynamic", 1, 0), pending("ensure-network"), pending("install")),
		// validate ended and ensure-network ran and ended between polls
		mk(v1.OpInProgress, 60, nil, ended("validate-dynamic", v1.StepSucceeded, 1, 0, 1200*time.Millisecond, ""),
			ended("ensure-network", v1.StepSucceeded, 1, 2*time.Second, 3*time.Second, ""), running("install", 1, 3*time.Second)),
		mk(v1.OpInProgress, 60, nil, ended("validate-dynamic", v1.StepSucceeded, 1, 0, 1200*time.Millisecond, ""),
			ended("ensure-network", v1.StepSucceeded, 1, 2*time.Second, 3*time.Second, ""), running("install", 2, 3*time.Second)),
		mk(v1.OpFailed, 60, at(10*time.Second), ended("validate-dynamic", v1.StepSucceeded, 1, 0, 1200*time.Millisecond, ""),
			ended("ensure-network", v1.StepSucceeded, 1, 2*time.Second, 3*time.Second, ""),
			ended("install", v1.StepFailed, 2, 3*time.Second, 10*time.Second, "apiserver did not start")),
	}
}

func TestLineProgress(t *testing.T) {
	var b bytes.Buffer
	p := newLineProgress(&b)
	states := opStates()
	for _, op := range states {
		p.update(op)
	}
	p.update(states[len(states)-1]) // a repeat prints nothing
	p.stop(states[len(states)-1])
	golden(t, "progress-lines.txt", b.Bytes())
}

func TestLiveViewText(t *testing.T) {
	states := opStates()
	golden(t, "progress-live.txt", []byte(liveView(states[2], t0.Add(5*time.Second), "*")))
}

func TestLiveProgressRedraws(t *testing.T) {
	var b testlog.Buffer
	p := newLiveProgress(&b, func() time.Time { return t0.Add(5 * time.Second) }, 40)
	states := opStates()
	p.update(states[0])
	p.stop(states[3])
	out := b.String()
	if !strings.Contains(out, "\x1b[4A") {
		t.Errorf("no cursor-up over the 4 drawn lines in %q", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if i := strings.LastIndex(line, "\x1b[2K"); i >= 0 && len([]rune(line[i+4:])) >= 40 {
			t.Errorf("line not cut to the width: %q", line[i+4:])
		}
	}
}

// TestOperationWatch runs 'kiln operation watch' in-process against a
// server that walks through opStates, one per request.
func TestOperationWatch(t *testing.T) {
	states := opStates()
	var (
		mu sync.Mutex
		i  int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path != "/v1/operations/op1" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(states[i])
		i = min(i+1, len(states)-1)
	}))
	defer srv.Close()
	env := []string{"KILN_SERVER=" + srv.URL, "KILN_TOKEN=t", "HOME=" + t.TempDir()}
	code, stdout, stderr := runCLI(t, env, "", "operation", "watch", "op1", "-o", "json")
	if code != ExitError {
		t.Errorf("exit %d, want %d for a failed operation", code, ExitError)
	}
	var got v1.Operation
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("stdout is not the operation: %v\n%s", err, stdout)
	}
	if got.Status != v1.OpFailed {
		t.Errorf("status = %s", got.Status)
	}
	var want bytes.Buffer
	p := newLineProgress(&want)
	for _, op := range states {
		p.update(op)
	}
	p.stop(states[len(states)-1])
	printOperationError(&want, states[len(states)-1])
	if diff := cmp.Diff(want.String(), stderr); diff != "" {
		t.Errorf("stderr (-want +got):\n%s", diff)
	}
}
