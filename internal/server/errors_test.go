package server_test

import (
	"net/http"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/server"
)

// TestErrorsNameTheirRecord: every NotFound and Conflict about a record
// names it (its kind and name) and the project it is in, whichever route
// asked for it.
func TestErrorsNameTheirRecord(t *testing.T) {
	h := newHarness(t, func(o *server.Options) { o.Activation = nil })
	h.project("p")
	const (
		p  = "/v1/projects/p"
		c  = p + "/clusters/c"
		in = `in project "p"`
	)
	_, opID := h.createCluster("p", "c", `{"spec": {"provider": "sim"}}`)
	h.finish(h.claim(), opID, v1.OpSucceeded, nil)
	h.createCluster("p", "busy", `{"spec": {"provider": "sim"}}`)
	h.putNode("sick", v1.NodePrecheckFailed, v1.PrecheckResult{Name: "os", Result: v1.PrecheckFail})
	h.must(http.StatusCreated, "PUT", "/v1/users/u", `{}`)
	h.must(http.StatusCreated, "PUT", p+"/serviceaccounts/sa", `{"role": "viewer"}`)
	h.must(http.StatusCreated, "PUT", p+"/cloudaccounts/acct", `{"provider": "sim", "credentials": {"accessKeyId": "AK", "secretAccessKey": "x"}}`)
	h.must(http.StatusCreated, "PUT", p+"/clusters/user", `{"spec": {"provider": "sim", "cloudAccount": "acct"}}`)

	tests := []struct {
		name, method, path, body string
		status                   int
		target                   string
		names                    []string // what the message must name
	}{
		// NotFound, for every kind of record.
		{name: "project", method: "GET", path: "/v1/projects/nope",
			status: 404, target: "project", names: []string{`project "nope" not found`}},
		{name: "project of a cluster", method: "GET", path: "/v1/projects/nope/clusters/c",
			status: 404, target: "project", names: []string{`project "nope" not found`}},
		{name: "project of a list", method: "GET", path: "/v1/projects/nope/cloudaccounts",
			status: 404, target: "project", names: []string{`project "nope" not found`}},
		{name: "cluster", method: "GET", path: p + "/clusters/nope",
			status: 404, target: "cluster", names: []string{`cluster "nope" not found ` + in}},
		{name: "cluster patched", method: "PATCH", path: p + "/clusters/nope", body: `{}`,
			status: 404, target: "cluster", names: []string{`cluster "nope" not found ` + in, "create it with PUT"}},
		{name: "cluster deleted", method: "DELETE", path: p + "/clusters/nope",
			status: 404, target: "cluster", names: []string{`cluster "nope" not found ` + in}},
		{name: "cluster's nodes", method: "GET", path: p + "/clusters/nope/nodes",
			status: 404, target: "cluster", names: []string{`cluster "nope" not found ` + in}},
		{name: "cluster's kubeconfig", method: "GET", path: p + "/clusters/nope/kubeconfig",
			status: 404, target: "cluster", names: []string{`cluster "nope" not found ` + in}},
		{name: "cluster's upgrades", method: "GET", path: p + "/clusters/nope/upgrades",
			status: 404, target: "cluster", names: []string{`cluster "nope" not found ` + in}},
		{name: "cluster retried", method: "POST", path: p + "/clusters/nope/retry",
			status: 404, target: "cluster", names: []string{`cluster "nope" not found ` + in}},
		{name: "cluster provisioned", method: "POST", path: p + "/clusters/nope/provision",
			status: 404, target: "cluster", names: []string{`cluster "nope" not found ` + in}},
		{name: "node", method: "GET", path: c + "/nodes/nope",
			status: 404, target: "node", names: []string{`node "nope" not found in cluster "c" of project "p"`}},
		{name: "node approved", method: "POST", path: c + "/nodes/nope/approve",
			status: 404, target: "node", names: []string{`node "nope" not found in cluster "c" of project "p"`}},
		{name: "node's logs", method: "GET", path: c + "/nodes/nope/logs",
			status: 404, target: "node", names: []string{`node "nope" not found in cluster "c" of project "p"`}},
		{name: "node of a missing cluster", method: "GET", path: p + "/clusters/nope/nodes/n",
			status: 404, target: "cluster", names: []string{`cluster "nope" not found ` + in}},
		{name: "operation", method: "GET", path: "/v1/operations/nope",
			status: 404, target: "operation", names: []string{`operation "nope" not found`}},
		{name: "operation canceled", method: "POST", path: "/v1/operations/nope/cancel",
			status: 404, target: "operation", names: []string{`operation "nope" not found`}},
		{name: "cloud account", method: "GET", path: p + "/cloudaccounts/nope",
			status: 404, target: "cloudaccount", names: []string{`cloud account "nope" not found ` + in}},
		{name: "cloud account deleted", method: "DELETE", path: p + "/cloudaccounts/nope",
			status: 404, target: "cloudaccount", names: []string{`cloud account "nope" not found ` + in}},
		{name: "profile", method: "GET", path: p + "/profiles/nope",
			status: 404, target: "profile", names: []string{`profile "nope" not found ` + in}},
		{name: "profile deleted", method: "DELETE", path: p + "/profiles/nope",
			status: 404, target: "profile", names: []string{`profile "nope" not found ` + in}},
		{name: "member", method: "GET", path: p + "/members/nope",
			status: 404, target: "member", names: []string{`member "nope" not found ` + in}},
		{name: "member removed", method: "DELETE", path: p + "/members/nope",
			status: 404, target: "member", names: []string{`member "nope" not found ` + in}},
		{name: "member's user", method: "PUT", path: p + "/members/ghost", body: `{"role": "viewer"}`,
			status: 404, target: "name", names: []string{`user "ghost" not found`, "kiln user create"}},
		{name: "service account", method: "GET", path: p + "/serviceaccounts/nope",
			status: 404, target: "serviceaccount", names: []string{`service account "nope" not found ` + in}},
		{name: "service account's tokens", method: "GET", path: p + "/serviceaccounts/nope/tokens",
			status: 404, target: "serviceaccount", names: []string{`service account "nope" not found ` + in}},
		{name: "service account's token", method: "DELETE", path: p + "/serviceaccounts/sa/tokens/tok_0000000000000000",
			status: 404, target: "token", names: []string{`token "tok_0000000000000000" not found for service account "sa" ` + in}},
		{name: "user", method: "GET", path: "/v1/users/nope",
			status: 404, target: "user", names: []string{`user "nope" not found`}},
		{name: "user deleted", method: "DELETE", path: "/v1/users/nope",
			status: 404, target: "user", names: []string{`user "nope" not found`}},
		{name: "user's tokens", method: "GET", path: "/v1/users/nope/tokens",
			status: 404, target: "user", names: []string{`user "nope" not found`}},
		{name: "user's token", method: "DELETE", path: "/v1/users/u/tokens/tok_0000000000000000",
			status: 404, target: "token", names: []string{`token "tok_0000000000000000" not found for user "u"`}},

		// Conflicts name the record they are about.
		{name: "change while an operation runs", method: "PATCH", path: p + "/clusters/busy", body: `{}`,
			status: 409, names: []string{`cluster "busy" ` + in + ` is Creating: operation `}},
		{name: "retry of what did not fail", method: "POST", path: c + "/retry",
			status: 409, target: "cluster", names: []string{`cluster "c" ` + in + ` is Succeeded`}},
		{name: "forced delete of what did not fail", method: "DELETE", path: c + "?force=true",
			status: 409, target: "force", names: []string{`cluster "c" ` + in}},
		{name: "kubeconfig without a CA", method: "GET", path: c + "/kubeconfig",
			status: 409, target: "cluster", names: []string{`cluster "c" ` + in + ` has no certificate authority`}},
		{name: "provision of a sim cluster", method: "POST", path: c + "/provision",
			status: 409, target: "cluster", names: []string{`cluster "c" ` + in + ` is not made of hosts that join`}},
		{name: "activation without a gateway", method: "POST", path: c + "/activation",
			status: 409, names: []string{`cluster "c" ` + in}},
		{name: "installer without a gateway", method: "GET", path: c + "/installer",
			status: 409, names: []string{`cluster "c" ` + in}},
		{name: "approve a node that failed prechecks", method: "POST", path: c + "/nodes/sick/approve",
			status: 409, target: "node", names: []string{`node "sick" in cluster "c" of project "p" failed prechecks (os)`}},
		{name: "configure a node that failed prechecks", method: "POST", path: c + "/nodes/sick/configure", body: `{"role": "worker"}`,
			status: 409, target: "node", names: []string{`node "sick" in cluster "c" of project "p" is PRECHECK_FAILED`}},
		{name: "delete a cloud account in use", method: "DELETE", path: p + "/cloudaccounts/acct",
			status: 409, target: "cloudaccount", names: []string{`cloud account "acct" ` + in + ` is used by 1 cluster(s): user`}},
		{name: "delete a project with clusters", method: "DELETE", path: p,
			status: 409, target: "project", names: []string{`project "p" is not empty`}},
		{name: "cancel an operation that ended", method: "POST", path: "/v1/operations/" + opID + "/cancel",
			status: 409, names: []string{`operation "` + opID + `" of cluster "c" ` + in + ` has ended`}},

		// So do the etag preconditions.
		{name: "create what exists", method: "PUT", path: c, body: `{"spec": {"provider": "sim"}}`,
			status: 412, target: "If-None-Match", names: []string{`cluster "c" ` + in + ` already exists`}},
		{name: "stale etag", method: "DELETE", path: p + "/serviceaccounts/sa",
			status: 412, target: "If-Match", names: []string{`service account "sa" ` + in}},
	}
	headers := map[string][]string{
		"create what exists": {"If-None-Match: *"},
		"stale etag":         {`If-Match: "stale"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.HasPrefix(tt.method, "PATCH") {
				headers[tt.name] = append(headers[tt.name], "Content-Type: application/merge-patch+json")
			}
			r := h.must(tt.status, tt.method, tt.path, tt.body, headers[tt.name]...)
			e := r.errorBody(t)
			wantCode := map[int]string{404: v1.CodeNotFound, 409: v1.CodeConflict, 412: v1.CodePreconditionFailed}[tt.status]
			if e.Code != wantCode {
				t.Errorf("code = %s, want %s", e.Code, wantCode)
			}
			if tt.target != "" && e.Target != tt.target {
				t.Errorf("target = %q, want %q", e.Target, tt.target)
			}
			for _, want := range tt.names {
				if !strings.Contains(e.Message, want) {
					t.Errorf("message %q does not say %q", e.Message, want)
				}
			}
		})
	}
}
