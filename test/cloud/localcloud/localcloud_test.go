package localcloud

import (
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type faults struct {
	ThrottleEvery int `json:"throttleEvery,omitempty"`
}

func TestAdmin(t *testing.T) {
	var set faults
	called := false
	a := Admin[faults]{
		Cloud: "the local Test", Whose: "one of its keys",
		Secrets:   func() []string { return []string{"s3cret", "other"} },
		Faults:    func() faults { return set },
		SetFaults: func(f faults) { set = f },
		Routes: map[string]http.HandlerFunc{
			"POST poke": func(w http.ResponseWriter, _ *http.Request) { called = true; w.WriteHeader(http.StatusNoContent) },
		},
	}
	do := func(method, path, token, body string) *http.Response {
		t.Helper()
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		a.ServeHTTP(w, r)
		return w.Result()
	}

	for _, tok := range []string{"", "wrong", "s3cre"} {
		resp := do("GET", "/_local/faults", tok, "")
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), "the local Test's admin API wants Authorization: Bearer SECRET, the secret of one of its keys") {
			t.Errorf("token %q: %d %s, want 401 saying what to send", tok, resp.StatusCode, b)
		}
	}
	if resp := do("PUT", "/_local/faults", "other", `{"throttleEvery":3}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT faults: %d", resp.StatusCode)
	}
	if set.ThrottleEvery != 3 {
		t.Errorf("faults after PUT: %+v, want throttleEvery 3", set)
	}
	resp := do("GET", "/_local/faults", "s3cret", "")
	var got faults
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got != set || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("GET faults: %+v (%v, %s), want %+v as JSON", got, err, resp.Header.Get("Content-Type"), set)
	}
	if resp := do("PUT", "/_local/faults", "s3cret", `{"throttleEverz":1}`); resp.StatusCode != http.StatusBadRequest || set.ThrottleEvery != 3 {
		t.Errorf("PUT of an unknown field: %d, faults %+v; want 400 and the faults unchanged", resp.StatusCode, set)
	}
	if resp := do("POST", "/_local/poke", "s3cret", ""); resp.StatusCode != http.StatusNoContent || !called {
		t.Errorf("POST poke: %d, called %v; want the route's answer", resp.StatusCode, called)
	}
	if resp := do("DELETE", "/_local/faults", "s3cret", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("DELETE faults: %d, want 404", resp.StatusCode)
	}
}

func TestParseAndPairs(t *testing.T) {
	var l StringList
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", "", "")
	fs.Var(&l, "client", "")
	if done, err := Parse(fs, "usage\n", []string{"--client", "a:b", "--client", "c:d"}, listen); done || err == nil || err.Error() != "--listen is required" {
		t.Errorf("no --listen: done %v, err %v; want --listen is required", done, err)
	}
	help := flag.NewFlagSet("y", flag.ContinueOnError)
	help.SetOutput(io.Discard)
	if done, err := Parse(help, "usage\n", []string{"--help"}, listen); !done || err != nil {
		t.Errorf("--help: done %v, err %v; want done without error", done, err)
	}
	p, err := Pairs("client", "ID:SECRET", l)
	if err != nil || len(p) != 2 || p[1] != [2]string{"c", "d"} {
		t.Errorf("Pairs(%v) = %v, %v", l, p, err)
	}
	for _, bad := range []string{"a", "a:", ":b"} {
		if _, err := Pairs("client", "ID:SECRET", []string{bad}); err == nil || err.Error() != `--client "`+bad+`": want ID:SECRET` {
			t.Errorf("Pairs(%q): %v, want the flag and the form named", bad, err)
		}
	}
}
