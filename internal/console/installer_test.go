package console_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/server"
)

// The installer tab: per architecture, the download (admins) and the
// commands; the command install.sh runs.
func TestInstallerPage(t *testing.T) {
	e := newEnv(t, false)
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge", Distribution: v1.DistroLocal})
	e.createCluster("sim1", v1.ClusterSpec{Provider: "sim"})
	b := e.browser()
	b.login(ownerToken)
	p := b.get("/projects/default/clusters/edge1/installer")
	for _, arch := range []string{"amd64", "arm64"} {
		cmds, ok := p.byID(t, "cmd-"+arch)
		if !ok || !strings.Contains(cmds, "tar -xzf kiln-installer-edge1-"+arch+".tar.gz") || !strings.Contains(cmds, "sudo ./install.sh") {
			t.Errorf("%s commands: %q", arch, cmds)
		}
		if !strings.Contains(p.body, `href="/projects/default/clusters/edge1/installer/download?arch=`+arch+`"`) {
			t.Errorf("no %s download", arch)
		}
	}
	if got, _ := p.byID(t, "install-command"); got != server.InstallCommand(v1.DistroLocal, "/opt/kiln-kube") {
		t.Errorf("install command %q", got)
	}
	// No backend has run the create, so there is no activation credential
	// to put in an installer: the API's answer is shown, not a broken
	// download.
	d := b.get("/projects/default/clusters/edge1/installer/download?arch=amd64")
	if msg, _ := d.byID(t, "error"); d.status != http.StatusConflict || !strings.Contains(msg, "no activation credential yet") ||
		strings.Contains(d.header.Get("Content-Disposition"), "attachment") {
		t.Errorf("download before the create ran: %d %q %s", d.status, msg, d.header.Get("Content-Disposition"))
	}
	if d := b.get("/projects/default/clusters/edge1/installer/download?arch=mips"); d.status != http.StatusBadRequest {
		t.Errorf("download for mips: %d, want 400", d.status)
	}
	// A sim cluster has no installer tab.
	if p := b.get("/projects/default/clusters/sim1"); strings.Contains(p.body, "/installer") {
		t.Error("a sim cluster's page links an installer")
	}
	// Nor a kubeconfig: the API's reason is shown.
	k := b.get("/projects/default/clusters/sim1/kubeconfig")
	if msg, _ := k.byID(t, "error"); k.status != http.StatusConflict || !strings.Contains(msg, "no certificate authority") {
		t.Errorf("sim kubeconfig: %d %q", k.status, msg)
	}
}

// An admin issues a new activation credential, or revokes it, from the
// installer page; an operator sees neither button, and is refused.
func TestActivation(t *testing.T) {
	e := newEnv(t, true)
	e.createCluster("edge1", v1.ClusterSpec{Provider: "edge"})
	e.wait("edge1") // its create makes the first credential
	const installer = "/projects/default/clusters/edge1/installer"
	ctx := t.Context()
	before, err := e.api.ReissueActivation(ctx, "default", "edge1")
	if err != nil {
		t.Fatal(err)
	}

	operator := e.browser()
	csrf := operator.login(e.user("otto", v1.RoleOperator))
	if forms := operator.get(installer).postForms(t); slices.Contains(forms, "/projects/default/clusters/edge1/activation/reissue") {
		t.Errorf("an operator sees %v", forms)
	}
	if p := operator.post("/projects/default/clusters/edge1/activation/reissue", url.Values{"csrf": {csrf}}); p.status != http.StatusForbidden {
		t.Errorf("an operator's reissue: %d, want 403", p.status)
	}

	admin := e.browser()
	csrf = admin.login(ownerToken)
	p := admin.post("/projects/default/clusters/edge1/activation/reissue", url.Values{"csrf": {csrf}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != installer {
		t.Fatalf("reissue: %d to %q", p.status, p.header.Get("Location"))
	}
	page := admin.get(installer)
	if !strings.Contains(page.body, "A new activation credential and passphrase were issued") {
		t.Error("the installer page does not say a new credential was issued")
	}
	// The new material is not on the page.
	after, err := e.api.ReissueActivation(ctx, "default", "edge1") // a third, to compare with
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{before.Passphrase, after.Passphrase} {
		if strings.Contains(page.body, secret) {
			t.Error("an activation passphrase is on the page")
		}
	}
	p = admin.post("/projects/default/clusters/edge1/activation/revoke", url.Values{"csrf": {csrf}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("revoke: %d %s", p.status, p.body)
	}
	if !strings.Contains(admin.get(installer).body, "The activation credential is revoked") {
		t.Error("the installer page does not say the credential is revoked")
	}
	// A sim cluster has no activation: the API's refusal, on the page.
	e.createCluster("sim1", v1.ClusterSpec{Provider: "sim"})
	p = admin.post("/projects/default/clusters/sim1/activation/reissue", url.Values{"csrf": {csrf}})
	if msg, _ := p.byID(t, "error"); p.status < 400 || msg == "" {
		t.Errorf("reissue for a sim cluster: %d %q", p.status, msg)
	}
}
