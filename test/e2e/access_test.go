package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// person is someone signed in to the env's kilnd with the kiln CLI (a
// config of their own) whose kubeconfig for a cluster is the one kiln
// kubeconfig writes: kubectl runs kiln credential for each use.
type person struct {
	e          *env
	name       string
	env        []string
	kubeconfig string
}

// newPerson makes user name a member of project default with role, signs
// them in with a token of theirs and writes their kubeconfig of cluster.
func (e *env) newPerson(name, role, cluster string) *person {
	e.t.Helper()
	ctx := e.t.Context()
	if _, err := e.c.PutUser(ctx, &v1.User{Name: name}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.c.PutMember(ctx, "default", &v1.Member{Name: name, Role: role}); err != nil {
		e.t.Fatal(err)
	}
	tok, err := e.c.CreateToken(ctx, client.TokenOwner{User: name}, v1.TokenRequest{})
	if err != nil {
		e.t.Fatal(err)
	}
	home := filepath.Join(e.data, "people", name)
	p := &person{e: e, name: name, env: append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home+"/config", "XDG_CACHE_HOME="+home+"/cache"),
		kubeconfig: filepath.Join(home, cluster+".kubeconfig")}
	p.kiln("login", "--server", e.k.URL(), "--token", tok.Value, "--ca-file", filepath.Join(e.data, "tls", "ca.crt"))
	p.kiln("kubeconfig", cluster, "--output-file", p.kubeconfig)
	return p
}

// kiln runs the CLI as the person.
func (p *person) kiln(args ...string) string {
	p.e.t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "kiln"), args...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		p.e.t.Fatalf("%s: kiln %s: %v: %s", p.name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// kubectl runs kubectl as the person, with their kubeconfig.
func (p *person) kubectl(args ...string) (string, error) {
	cmd := exec.CommandContext(p.e.t.Context(), kubeBin, append([]string{"kubectl", "--kubeconfig", p.kubeconfig, "--request-timeout", "20s"}, args...)...)
	cmd.Env = p.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: kubectl %s: %w: %s", p.name, strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// may checks that the person's kubectl args succeeds (want true) or is
// refused by the API server as forbidden (want false).
func (p *person) may(want bool, args ...string) {
	p.e.t.Helper()
	out, err := p.kubectl(args...)
	switch {
	case want && err != nil:
		p.e.t.Errorf("%v", err)
	case !want && err == nil:
		p.e.t.Errorf("%s: kubectl %s was allowed: %s", p.name, strings.Join(args, " "), out)
	case !want && !strings.Contains(err.Error(), "forbidden"):
		p.e.t.Errorf("%v; want forbidden", err)
	}
}

// TestPeopleAccess: on a docker cluster, each person's kubeconfig from
// kiln kubeconfig gets them their own credential through kiln credential,
// with their project role's rights: a viewer reads but does not delete or
// exec; an operator deploys and execs but grants nothing cluster-wide; an
// admin does. kubectl auth whoami names each. A member removed gets no new
// credential, and with a one-minute credentialTTL their kubeconfig stops
// working within it.
func TestPeopleAccess(t *testing.T) {
	t.Parallel()
	e := startDocker(t)
	const cluster = "acc"
	cl := dockerCluster(cluster, "", 1, false, 0)
	cl.Spec.Access = &v1.Access{CredentialTTL: "1m"}
	if s := stepOf(e.create(cl), "install-access"); s.State != v1.StepSucceeded {
		t.Fatalf("install-access: %+v", s)
	}

	viewer := e.newPerson("vera", v1.RoleViewer, cluster)
	operator := e.newPerson("otto", v1.RoleOperator, cluster)
	admin := e.newPerson("ada", v1.RoleAdmin, cluster)
	for _, p := range []*person{viewer, operator, admin} {
		out, err := p.kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out, p.name+" ") || !strings.Contains(out, "kiln:people") {
			t.Errorf("%s: kubectl auth whoami says %q, want their name and kiln:people", p.name, out)
		}
	}

	operator.may(true, "create", "deployment", "web", "--image", "registry.k8s.io/pause:3.10.2", "--replicas", "1")
	operator.may(true, "rollout", "status", "deployment/web", "--timeout", "2m")
	pod := strings.TrimSpace(e.mustKubectl(cluster, "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[0].metadata.name}"))
	operator.may(true, "get", "pods", pod)
	operator.may(false, "create", "clusterrolebinding", "otto-admin", "--clusterrole", "cluster-admin", "--user", "otto")

	viewer.may(true, "get", "pods", "-A")
	viewer.may(true, "get", "nodes")
	viewer.may(false, "delete", "deployment", "web")
	if out, _ := viewer.kubectl("auth", "can-i", "create", "pods/exec"); strings.TrimSpace(out) != "no" {
		t.Errorf("vera (viewer) may exec into pods: can-i says %q", out)
	}
	if out, _ := operator.kubectl("auth", "can-i", "create", "pods/exec"); strings.TrimSpace(out) != "yes" {
		t.Errorf("otto (operator) may not exec into pods: can-i says %q", out)
	}

	admin.may(true, "create", "clusterrolebinding", "ada-test", "--clusterrole", "view", "--user", "someone")
	admin.may(true, "delete", "clusterrolebinding", "ada-test")

	// Removed: the next credential is refused, and the one kubectl has
	// ends with its minute.
	if err := e.c.DeleteMember(t.Context(), "default", "vera"); err != nil {
		t.Fatal(err)
	}
	// (With a cache of its own: the one kubectl used keeps its credential
	// for its life, which is the bound a removal has.)
	cmd := exec.Command(filepath.Join(binDir, "kiln"), "credential", cluster)
	cmd.Env = append(viewer.env, "XDG_CACHE_HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "has no role in project default") {
		t.Errorf("kiln credential after the removal: %v %s; want it refused, naming the project", err, out)
	}
	removed := time.Now()
	waitfor.Cond(t, "vera's kubeconfig to stop working", 2*time.Minute, func() (bool, error) {
		_, err := viewer.kubectl("get", "pods")
		return err != nil, nil
	})
	if d := time.Since(removed); d > time.Minute+30*time.Second {
		t.Errorf("vera's kubeconfig worked %s after her removal, past the 1m credentialTTL", d)
	}
}
