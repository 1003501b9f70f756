package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// The API latency benchmark (issue 9, benchmark 2) sends GET cluster and PUT
// cluster at a fixed rate, open loop (a request is sent when it is due,
// whether or not the ones before were answered, and its latency counts from
// when it was due), to kilnd during a fleet wave and, in the same window, to
// the reference: a bare net/http handler in a process of its own answering
// the same JSON over the same HTTPS and HTTP/2. The ratio of the two is the
// figure that survives a noisy machine.

const (
	probeRate     = 1000 // requests a second to each target (issue 9)
	probePutEvery = 10   // every 10th request is a PUT, the others GETs
	probeInFlight = 512  // requests in flight before more are counted as skipped
	probeCluster  = "probe-target"
)

// target is where a probe sends its requests.
type target struct {
	name   string
	base   string // URL without a trailing slash
	token  string // bearer token, or "" for none
	client *http.Client
}

// probeResult is what a probe measured.
type probeResult struct {
	get, put latencies
	errors   atomic.Int64
	skipped  atomic.Int64 // due while probeInFlight requests were waiting
	mu       sync.Mutex
	firstErr string
}

func (r *probeResult) fail(format string, args ...any) {
	r.errors.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstErr == "" {
		r.firstErr = fmt.Sprintf(format, args...)
	}
}

// probe sends rate requests a second to tg until ctx ends: every
// probePutEvery-th a PUT creating cluster probe-put-N with putBody (201
// expected), the others GET cluster probeCluster (200 expected). It returns
// when every request it sent has been answered.
func probe(ctx context.Context, tg target, rate int, putBody []byte, res *probeResult) {
	interval := time.Second / time.Duration(rate)
	sem := make(chan struct{}, probeInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for i := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for now := time.Now(); !start.Add(time.Duration(i) * interval).After(now); i++ {
			due := start.Add(time.Duration(i) * interval)
			select {
			case sem <- struct{}{}:
			default:
				res.skipped.Add(1)
				continue
			}
			n, put := i, i%probePutEvery == probePutEvery-1
			wg.Go(func() {
				defer func() { <-sem }()
				method, path, body, want, into := http.MethodGet, "/v1/projects/default/clusters/"+probeCluster, []byte(nil), http.StatusOK, &res.get
				if put {
					method, path, body, want, into = http.MethodPut, fmt.Sprintf("/v1/projects/default/clusters/probe-put-%d", n), putBody, http.StatusCreated, &res.put
				}
				status, msg, err := tg.do(context.WithoutCancel(ctx), method, path, body)
				switch {
				case err != nil:
					res.fail("%s %s %s: %v", tg.name, method, path, err)
				case status != want:
					res.fail("%s %s %s: status %d, want %d: %s", tg.name, method, path, status, want, msg)
				default:
					into.add(time.Since(due))
				}
			})
		}
	}
}

// do sends one request and reads the whole answer; msg is the body when the
// status is not 2xx.
func (tg target) do(ctx context.Context, method, path string, body []byte) (status int, msg string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, tg.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if tg.token != "" {
		req.Header.Set("Authorization", "Bearer "+tg.token)
	}
	if method == http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("If-None-Match", "*")
	}
	resp, err := tg.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		msg = string(b)
	}
	return resp.StatusCode, msg, err
}

// kilndTarget is the API of k, with its admin token, over HTTP/2.
func kilndTarget(k *daemon) target {
	tr := &http.Transport{TLSClientConfig: k.TLSConfig(), ForceAttemptHTTP2: true, MaxIdleConnsPerHost: probeInFlight}
	return target{name: "kilnd", base: k.URL(), token: k.Token, client: &http.Client{Transport: tr}}
}

// Environment of the reference process: the file with the JSON to answer.
const referenceEnv = "KILN_BENCH_REFERENCE_BODY"

// serveReference is the reference process's main (see TestMain): an HTTPS
// server with HTTP/2 whose handler answers every GET with the JSON in the
// file $KILN_BENCH_REFERENCE_BODY (200) and every PUT, once its body is
// read, with the same (201). It prints its URL and certificate on one line
// and serves until its stdin closes.
func serveReference() int {
	body, err := os.ReadFile(os.Getenv(referenceEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := http.StatusOK
		if r.Method == http.MethodPut {
			io.Copy(io.Discard, r.Body)
			status = http.StatusCreated
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(body)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	fmt.Printf("%s %s\n", srv.URL, base64.StdEncoding.EncodeToString(srv.Certificate().Raw))
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// startReference starts this test binary as the reference process, serving
// body, and returns a target for it; it stops when the test ends.
func startReference(t testing.TB, body []byte) target {
	t.Helper()
	file := filepath.Join(t.TempDir(), "reference.json")
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), referenceEnv+"="+file)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	url, cert, ok := strings.Cut(strings.TrimSpace(line), " ")
	if err != nil || !ok {
		t.Fatalf("reference process: %q, %v", line, err)
	}
	der, err := base64.StdEncoding.DecodeString(cert)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: probeInFlight}
	return target{name: "reference", base: url, client: &http.Client{Transport: tr}}
}

// latencyRun is one run of the latency benchmark: a fresh kilnd, the
// reference, a first cluster to GET, then both probed at rate while a wave
// of n clusters is created.
type latencyRun struct {
	kilnd, ref probeResult
	wave       waveResult
}

func runLatency(t testing.TB, n, clients, rate int) *latencyRun {
	ctx := t.Context()
	k := startKilnd(t, strings.Fields(os.Getenv("KILN_BENCH_KILND_ARGS"))...)
	_, opID, err := k.API.CreateCluster(ctx, "default", simSpec(probeCluster))
	if err != nil {
		t.Fatal(err)
	}
	if op, err := k.API.WaitOperation(ctx, opID, nil); err != nil || op.Status != v1.OpSucceeded {
		t.Fatalf("create %s: %v %+v", probeCluster, err, op)
	}
	kt := kilndTarget(k)
	body, err := getBody(ctx, kt, "/v1/projects/default/clusters/"+probeCluster)
	if err != nil {
		t.Fatal(err)
	}
	rt := startReference(t, body)
	putBody, err := json.Marshal(simSpec(""))
	if err != nil {
		t.Fatal(err)
	}

	r := &latencyRun{}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { probe(pctx, kt, rate, putBody, &r.kilnd) })
	wg.Go(func() { probe(pctx, rt, rate, putBody, &r.ref) })
	saved := k.profileCPU(t, "latency", 20*time.Second)
	r.wave = wave(ctx, t, k.API, "wave", n, clients)
	// A small wave may end before the first PUTs were answered.
	waitfor.Cond(t, "the probes' first PUTs", time.Minute, func() (bool, error) {
		for _, p := range []*probeResult{&r.kilnd, &r.ref} {
			if p.errors.Load() > 0 {
				p.mu.Lock()
				defer p.mu.Unlock()
				return false, errors.New(p.firstErr)
			}
		}
		return r.kilnd.put.count() > 0 && r.ref.put.count() > 0, nil
	})
	stop()
	wg.Wait()
	saved()
	return r
}

// getBody is the body of GET path.
func getBody(ctx context.Context, tg target, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tg.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tg.token)
	resp, err := tg.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
	}
	return b, err
}

// BenchmarkAPILatency is benchmark 2 of issue 9: p50 and p99 of GET cluster
// and PUT cluster at 1,000 requests a second (one in 10 a PUT that creates a
// cluster) during a wave of 1,000 clusters, and of the reference in the same
// window. Targets: p99 GET under 20 ms, p99 PUT under 50 ms. Run with
// -benchtime 1x.
func BenchmarkAPILatency(b *testing.B) {
	for b.Loop() {
		r := runLatency(b, 1000, waveClients, probeRate)
		for _, p := range []*probeResult{&r.kilnd, &r.ref} {
			if n := p.errors.Load(); n > 0 {
				b.Errorf("%d requests failed; the first: %s", n, p.firstErr)
			}
		}
		kg, kp := r.kilnd.get.percentile(99), r.kilnd.put.percentile(99)
		rg, rp := r.ref.get.percentile(99), r.ref.put.percentile(99)
		b.ReportMetric(ms(r.kilnd.get.percentile(50)), "get-p50-ms")
		b.ReportMetric(ms(kg), "get-p99-ms")
		b.ReportMetric(ms(r.kilnd.put.percentile(50)), "put-p50-ms")
		b.ReportMetric(ms(kp), "put-p99-ms")
		b.ReportMetric(ms(rg), "ref-get-p99-ms")
		b.ReportMetric(ms(rp), "ref-put-p99-ms")
		b.ReportMetric(ms(kg)/ms(rg), "get-p99-ratio")
		b.ReportMetric(ms(kp)/ms(rp), "put-p99-ratio")
		b.Logf("api latency during a wave of 1000 (all Succeeded in %s): kilnd GET p50 %s p99 %s (%d), PUT p50 %s p99 %s (%d), skipped %d; reference GET p50 %s p99 %s, PUT p99 %s, skipped %d",
			r.wave.done.Round(time.Millisecond),
			r.kilnd.get.percentile(50), kg, r.kilnd.get.count(), r.kilnd.put.percentile(50), kp, r.kilnd.put.count(), r.kilnd.skipped.Load(),
			r.ref.get.percentile(50), rg, rp, r.ref.skipped.Load())
	}
}

// TestAPILatencySmall runs the latency benchmark's code at 50 requests a
// second during a wave of 16 clusters: every request to kilnd and to the
// reference must be answered as expected (the PUTs created their clusters),
// and both must have answered GETs and PUTs.
func TestAPILatencySmall(t *testing.T) {
	r := runLatency(t, 16, 4, 50)
	for _, p := range []*probeResult{&r.kilnd, &r.ref} {
		if n := p.errors.Load(); n > 0 {
			t.Errorf("%d requests failed; the first: %s", n, p.firstErr)
		}
		if p.get.count() == 0 || p.put.count() == 0 {
			t.Errorf("answered: %d GETs, %d PUTs; want some of each", p.get.count(), p.put.count())
		}
	}
}
