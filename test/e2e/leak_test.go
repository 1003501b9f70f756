package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/test/kilndtest"
)

// secretsStayInside plants secrets with recognizable values next to a real
// cluster's own (agent credential, passphrase, CA key, service-account
// key), sends every route of the API a request, as the owner, and fails if
// any secret appears in an answer, in kilnd's log or in an agent's log. The
// only answers allowed to hold a secret are those that exist to hand one
// out once: a new token's value in the answer that creates it.
func (e *env) secretsStayInside(cluster string) {
	t := e.t
	ctx := t.Context()
	secrets := map[string]string{
		"cloud credential": "CANARY-CLOUD-SECRET-6f1d2c",
		"project secret":   "CANARY-PROJECT-SECRET-93be01",
		"owner token":      kilndtest.Token(e.t, e.data),
	}
	st, err := sqlite.Open(ctx, filepath.Join(e.data, "kiln.db"), kilndtest.Sealer(t, e.data))
	if err != nil {
		t.Fatal(err)
	}
	k := store.Key{Project: "default", Name: cluster}
	_, secrets["agent credential"], secrets["passphrase"], err = trust.ClearCredentials(ctx, st, k)
	if err != nil {
		t.Fatalf("read the cluster's credentials: %v", err)
	}
	for name, secret := range map[string]string{"CA key": trust.SecretCA, "service-account key": trust.SecretServiceAccount} {
		b, err := st.GetClusterSecret(ctx, k, secret)
		if err != nil {
			t.Fatalf("read the cluster's %s: %v", name, err)
		}
		secrets[name] = privateKeyLine(string(b))
	}
	// The route table, from a server over a scratch store.
	scratch, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "scratch.db"))
	if err != nil {
		t.Fatal(err)
	}
	routes := server.New(server.Options{Store: scratch}).Routes()
	scratch.Close()
	st.Close()

	// Records with secrets of their own, for the routes that name them.
	if _, err := e.c.PutUser(ctx, &v1.User{Name: "leak-user"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.PutMember(ctx, "default", &v1.Member{Name: "leak-user", Role: v1.RoleViewer}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.PutServiceAccount(ctx, "default", &v1.ServiceAccount{Name: "leak-sa", Role: v1.RoleViewer}); err != nil {
		t.Fatal(err)
	}
	saToken, err := e.c.CreateToken(ctx, client.TokenOwner{Project: "default", ServiceAccount: "leak-sa"}, v1.TokenRequest{})
	if err != nil {
		t.Fatal(err)
	}
	secrets["service account token"] = saToken.Value
	e.send("PUT", "/v1/projects/default/cloudaccounts/leak-account",
		`{"provider": "local", "credentials": {"key": "`+secrets["cloud credential"]+`"}}`)
	e.send("PUT", "/v1/projects/default/profiles/leak-profile", `{"kubernetesVersion": "v1.36.3"}`)
	e.send("PUT", "/v1/projects/default/secrets/leak-secret", `{"data": {"password": "`+secrets["project secret"]+`"}}`)
	// A diagnostics bundle, gathered now: every file of it is checked.
	diag, err := e.c.CreateDiagnostics(ctx, "default", cluster)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := e.c.DiagnosticsBundle(ctx, "default", cluster, diag.ID)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := e.c.ListNodes(ctx, "default", cluster)
	if err != nil || len(nodes) == 0 {
		t.Fatalf("nodes: %v %v", nodes, err)
	}
	ops, err := e.c.ListOperations(ctx, "default", cluster)
	if err != nil || len(ops) == 0 {
		t.Fatalf("operations: %v %v", ops, err)
	}
	fill := strings.NewReplacer("{project}", "default", "{cluster}", cluster, "{node}", nodes[0].Name,
		"{operation}", client.OperationID(ops[0].ID), "{cloudaccount}", "leak-account", "{profile}", "leak-profile",
		"{user}", "admin", "{member}", "leak-user", "{serviceaccount}", "leak-sa", "{token}", saToken.ID,
		"{secret}", "leak-secret", "{diagnostics}", diag.ID)

	type answer struct{ what, body string }
	var seen []answer
	files := untarGz(t, bundle)
	if len(files) < 5 {
		t.Errorf("the diagnostics bundle holds %d files", len(files))
	}
	for name, body := range files {
		seen = append(seen, answer{"diagnostics bundle's " + name, body})
	}
	for _, rt := range routes {
		method, path, _ := strings.Cut(rt.Pattern, " ")
		path = fill.Replace(path)
		body := ""
		if method != "GET" {
			// Refused before it changes anything: a stale If-Match and a
			// body with an unknown field. The error answers count too.
			body = `{"leakCheck": true}`
			if method == "DELETE" && strings.HasSuffix(rt.Pattern, "{token}") {
				path = strings.Replace(path, saToken.ID, "tok_0000000000000000", 1)
			}
		}
		seen = append(seen, answer{rt.Pattern, e.send(method, path, body)})
	}
	if _, err := e.c.GetCluster(ctx, "default", cluster); err != nil {
		t.Fatalf("the cluster after every route was sent a request: %v", err)
	}
	seen = append(seen, answer{"kilnd's log", e.k.LogText()})
	logs, _ := filepath.Glob(filepath.Join(e.data, "machines", "default", cluster, "*", "agent.log"))
	if len(logs) == 0 {
		t.Error("found no agent logs to check")
	}
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		seen = append(seen, answer{l, string(b)})
	}
	for _, a := range seen {
		for name, v := range secrets {
			if v != "" && strings.Contains(a.body, v) {
				t.Errorf("the %s appears in %s", name, a.what)
			}
		}
	}
}

// untarGz is the files of a tar.gz, by name.
func untarGz(t testing.TB, data []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = string(b)
	}
}

// privateKeyLine is the first base64 line of the last PEM private key in
// s: enough to recognize the key anywhere.
func privateKeyLine(s string) string {
	i := strings.LastIndex(s, "PRIVATE KEY-----\n")
	if i < 0 {
		return ""
	}
	rest := s[i+len("PRIVATE KEY-----\n"):]
	line, _, _ := strings.Cut(rest, "\n")
	return line
}

// send makes a request as the owner with a stale If-Match and returns the
// answer's body, whatever its status.
func (e *env) send(method, path, body string) string {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.k.URL()+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+kilndtest.Token(e.t, e.data))
	if method != "GET" && method != "PUT" || strings.Contains(body, "leakCheck") {
		req.Header.Set("If-Match", `"leak-check-stale"`)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.httpClient().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// httpClient is the client raw requests to kilnd go through.
func (e *env) httpClient() *http.Client { return e.k.HTTPClient() }

// reissueActivation reissues a cluster's activation material through the
// API: the answer holds a new credential and passphrase, the store's clear
// copies (what new local machines join with) follow, the reissue is in the
// audit log, and a revoke answers 204.
func (e *env) reissueActivation(cluster string) {
	t := e.t
	ctx := t.Context()
	readClear := func() (id, secret, pass string) {
		st, err := sqlite.Open(ctx, filepath.Join(e.data, "kiln.db"), kilndtest.Sealer(t, e.data))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		id, secret, pass, err = trust.ClearCredentials(ctx, st, store.Key{Project: "default", Name: cluster})
		if err != nil {
			t.Fatal(err)
		}
		return id, secret, pass
	}
	oldID, oldSecret, oldPass := readClear()
	a, err := e.c.ReissueActivation(ctx, "default", cluster)
	if err != nil {
		t.Fatalf("reissue: %v", err)
	}
	if a.Credentials.ID == oldID || a.Credentials.Secret == oldSecret || a.Passphrase == oldPass || a.Passphrase == "" {
		t.Errorf("reissued material is not new: %s", a.Credentials.ID)
	}
	if id, secret, pass := readClear(); id != a.Credentials.ID || secret != a.Credentials.Secret || pass != a.Passphrase {
		t.Errorf("the stored credential %s is not the reissued %s", id, a.Credentials.ID)
	}
	entries, err := e.c.ListAudit(ctx, client.AuditFilter{Action: "activation", Limit: 1})
	if err != nil || len(entries) != 1 || entries[0].Result != v1.AuditSuccess || entries[0].Actor != "user:admin" {
		t.Errorf("audit of the reissue: %+v, %v", entries, err)
	}
	if err := e.c.RevokeActivation(ctx, "default", cluster); err != nil {
		t.Errorf("revoke: %v", err)
	}
}
