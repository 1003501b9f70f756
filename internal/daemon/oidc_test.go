package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kiln.dev/kiln/internal/oidc"
)

// TestOIDCFlags: the --oidc-* flags and --oidc-config give the identity
// providers; a mistake in them stops kilnd at start, naming the flag.
func TestOIDCFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := write("secret", "s3cret\n")
	list := write("idps.json", `[{"url": "https://login.example.com", "clientID": "kiln", "groupsClaim": "roles"}]`)
	f := OIDCFlags{Issuer: oidc.Issuer{URL: "https://idp.example.com", ClientID: "cli", ConsoleClientID: "web",
		ConsoleClientSecretFile: secret}, Config: list}
	issuers, err := f.Issuers()
	if err != nil || len(issuers) != 2 || issuers[0].GroupsClaim != "roles" || issuers[1].ClientID != "cli" {
		t.Fatalf("Issuers() = %+v, %v", issuers, err)
	}
	c := Config{OIDC: issuers}
	if err := c.readOIDCSecrets(); err != nil || c.OIDC[1].ConsoleClientSecret != "s3cret" {
		t.Errorf("readOIDCSecrets: %v, secret %q", err, c.OIDC[1].ConsoleClientSecret)
	}

	for _, tc := range []struct {
		f    OIDCFlags
		want string
	}{
		{OIDCFlags{Issuer: oidc.Issuer{ClientID: "cli"}}, "--oidc-issuer"},
		{OIDCFlags{Config: write("bad.json", `{"url": 1}`)}, "--oidc-config"},
		{OIDCFlags{Config: write("unknown.json", `[{"url": "https://a", "clientID": "x", "consoleClientSecret": "in-the-file"}]`)}, "--oidc-config"},
		{OIDCFlags{Config: write("empty.json", `[]`)}, "--oidc-config"},
	} {
		if _, err := tc.f.Issuers(); !names(err, tc.want) {
			t.Errorf("Issuers(%+v) = %v, want an error naming %s", tc.f, err, tc.want)
		}
	}
	for _, is := range []oidc.Issuer{
		{URL: "http://idp.example.com", ClientID: "cli"},
		{URL: "https://idp.example.com", ClientID: "cli", ConsoleClientSecretFile: filepath.Join(dir, "missing")},
	} {
		c := Config{OIDC: []oidc.Issuer{is}}
		if err := c.readOIDCSecrets(); !names(err, "--oidc-") {
			t.Errorf("readOIDCSecrets(%+v) = %v, want an error naming the flag", is, err)
		}
	}
}

// names reports whether err is a *FlagError of a flag starting with want.
func names(err error, want string) bool {
	var fe *FlagError
	return errors.As(err, &fe) && strings.HasPrefix(fe.Flag, want)
}
