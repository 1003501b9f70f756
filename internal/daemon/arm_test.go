package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/server"
)

// bearer is an azcore pipeline policy that sends kilnd's token (azcore's
// own bearer policy wants an Entra ID credential).
type bearer string

func (b bearer) Do(req *policy.Request) (*http.Response, error) {
	req.Raw().Header.Set("Authorization", "Bearer "+string(b))
	return req.Next()
}

// TestARMPollerDrivesCreateAndDelete: a long-running-operation poller that
// nobody in this project wrote, the Azure SDK for Go's (azcore/runtime,
// what every ARM client module is built on), drives a PUT, a PATCH and a
// DELETE of a cluster to completion against a real kilnd on loopback. It
// refuses operation URLs that are not absolute ("invalid polling URL"),
// follows Azure-AsyncOperation until the operation's status is terminal,
// and for the PUT and PATCH gets the cluster from its own URL at the end.
// A create that fails ends the poll with the operation's error code.
func TestARMPollerDrivesCreateAndDelete(t *testing.T) {
	d, hc := startDaemon(t)
	pl := runtime.NewPipeline("kiln-arm-test", "v0.0.0", runtime.PipelineOptions{
		PerCall: []policy.Policy{bearer(d.Token)},
	}, &policy.ClientOptions{Transport: hc})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	url := d.URL + "/v1/projects/default/clusters/arm"

	cl, err := pollARM[v1.Cluster](ctx, pl, http.MethodPut, url, simCluster("arm", 1, nil), http.StatusCreated)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if cl.Name != "arm" || cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Fatalf("after the create the poller got %s in state %s, want arm Succeeded", cl.Name, cl.Status.ProvisioningState)
	}

	patch := map[string]any{"spec": map[string]any{"workerPools": []map[string]any{{"name": "default", "size": 2}}}}
	cl, err = pollARM[v1.Cluster](ctx, pl, http.MethodPatch, url, patch, http.StatusAccepted)
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if cl.Status.ProvisioningState != v1.StateSucceeded || cl.Spec.WorkerPools[0].Size != 2 || cl.Status.Nodes.Workers != 2 {
		t.Fatalf("after the update the poller got state %s, %d workers of %d wanted; want Succeeded with 2",
			cl.Status.ProvisioningState, cl.Status.Nodes.Workers, cl.Spec.WorkerPools[0].Size)
	}

	op, err := pollARM[v1.Operation](ctx, pl, http.MethodDelete, url, nil, http.StatusAccepted)
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	if op.Status != v1.OpSucceeded || op.Properties.Kind != v1.KindDelete {
		t.Fatalf("the delete ended %s (%s), want a Succeeded delete", op.Status, op.Properties.Kind)
	}
	req, err := runtime.NewRequest(ctx, http.MethodGet, url)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := pl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET after the delete answered %s, want 404", resp.Status)
	}

	doomed := simCluster("arm-doomed", 1, map[string]string{"sim.kiln.dev/fail-terminal": "ensure-worker-machines"})
	_, err = pollARM[v1.Cluster](ctx, pl, http.MethodPut, d.URL+"/v1/projects/default/clusters/arm-doomed", doomed, http.StatusCreated)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.ErrorCode != v1.CodeProviderError {
		t.Errorf("a create that fails: the poller ended with %v; want a ResponseError with code %s", err, v1.CodeProviderError)
	}
}

// pollARM sends method to url with body (JSON; nil for none), wants the
// status want, and hands the answer to an azcore poller, which polls it to
// the end and returns its result.
func pollARM[T any](ctx context.Context, pl runtime.Pipeline, method, url string, body any, want int) (T, error) {
	var zero T
	req, err := runtime.NewRequest(ctx, method, url)
	if err != nil {
		return zero, err
	}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return zero, err
		}
		if err := req.SetBody(streaming.NopCloser(bytes.NewReader(b)), "application/json"); err != nil {
			return zero, err
		}
	}
	resp, err := pl.Do(req)
	if err != nil {
		return zero, err
	}
	if resp.StatusCode != want {
		return zero, fmt.Errorf("%s answered %s, want %d", method, resp.Status, want)
	}
	poller, err := runtime.NewPoller[T](resp, pl, nil)
	if err != nil {
		return zero, fmt.Errorf("the ARM poller refused kilnd's answer to a %s: %w", method, err)
	}
	// kilnd's Retry-After (1 s) sets the pace.
	return poller.PollUntilDone(ctx, &runtime.PollUntilDoneOptions{Frequency: time.Second})
}

// startDaemon starts an all-in-one dev kilnd in this process and returns
// it with an HTTP client that trusts its CA.
func startDaemon(t *testing.T) (*Daemon, *http.Client) {
	t.Helper()
	d, err := Start(t.Context(), Config{
		DataDir:     t.TempDir(),
		Listen:      "127.0.0.1:0",
		AgentListen: "127.0.0.1:0",
		Dev:         true,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(d.CACert) {
		t.Fatal("kilnd's CA certificate does not parse")
	}
	return d, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
}

// adminGet GETs path of d's API with hc as its admin, and returns the
// status code and the body.
func adminGet(t *testing.T, d *Daemon, hc *http.Client, path string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, d.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestEveryAPIRouteReachesTheAPI: kilnd's root handler hands every route
// the API registers to the API, not to the console (which has every path
// server.Paths does not claim), and GET /openapi.json answers the
// document there.
func TestEveryAPIRouteReachesTheAPI(t *testing.T) {
	d, hc := startDaemon(t)
	for _, rt := range d.front.api.Routes() {
		_, path, _ := strings.Cut(rt.Pattern, " ")
		if !slices.ContainsFunc(server.Paths, func(p string) bool {
			return path == p || strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)
		}) {
			t.Errorf("%s is registered by the API but kilnd's root serves the console there: add it to server.Paths", rt.Pattern)
		}
	}
	code, b := adminGet(t, d, hc, "/openapi.json")
	if code != http.StatusOK || !bytes.Equal(b, server.OpenAPIDocument()) {
		t.Errorf("GET /openapi.json on kilnd answered %d with %d bytes, not the document", code, len(b))
	}
}

// TestARMPagerFollowsNextLink: the Azure SDK for Go's pager, with
// runtime.NewRequestForNextLink as its generated clients page, reads every
// page of a list, though kilnd's nextLink is a path, not an absolute URL.
func TestARMPagerFollowsNextLink(t *testing.T) {
	d, hc := startDaemon(t)
	pl := runtime.NewPipeline("kiln-arm-test", "v0.0.0", runtime.PipelineOptions{
		PerCall: []policy.Policy{bearer(d.Token)},
	}, &policy.ClientOptions{Transport: hc})
	ctx := t.Context()
	for _, p := range []string{"arm-a", "arm-b"} {
		req, err := runtime.NewRequest(ctx, http.MethodPut, d.URL+"/v1/projects/"+p)
		if err != nil {
			t.Fatal(err)
		}
		if err := req.SetBody(streaming.NopCloser(strings.NewReader("{}")), "application/json"); err != nil {
			t.Fatal(err)
		}
		resp, err := pl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("PUT project %s answered %s", p, resp.Status)
		}
	}
	first := d.URL + "/v1/projects?top=1"
	pager := runtime.NewPager(runtime.PagingHandler[v1.List[v1.Project]]{
		More: func(page v1.List[v1.Project]) bool { return page.NextLink != "" },
		Fetcher: func(ctx context.Context, page *v1.List[v1.Project]) (v1.List[v1.Project], error) {
			var out v1.List[v1.Project]
			req, err := runtime.NewRequest(ctx, http.MethodGet, first)
			if page != nil {
				req, err = runtime.NewRequestForNextLink(ctx, http.MethodGet, d.URL, page.NextLink)
			}
			if err != nil {
				return out, err
			}
			resp, err := pl.Do(req)
			if err != nil {
				return out, err
			}
			if !runtime.HasStatusCode(resp, http.StatusOK) {
				return out, runtime.NewResponseError(resp)
			}
			return out, runtime.UnmarshalAsJSON(resp, &out)
		},
	})
	var names []string
	pages := 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		for _, p := range page.Value {
			names = append(names, p.Name)
		}
	}
	if want := []string{"arm-a", "arm-b", "default"}; !slices.Equal(names, want) || pages != 3 {
		t.Errorf("the pager read %v in %d pages, want %v in 3", names, pages, want)
	}
}
