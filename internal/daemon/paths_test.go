package daemon

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestRelativePathsAreResolvedAtStart: every flag that names a file or a
// directory is made absolute against the directory kilnd started in, since
// local machines' agents run in directories of their own (issue 19: a
// relative --data-dir handed them credential paths they could not open).
// A PostgreSQL URL is left as it is.
func TestRelativePathsAreResolvedAtStart(t *testing.T) {
	wd := t.TempDir()
	t.Chdir(wd)
	cfg := Config{
		DataDir:       ".data",
		Store:         "db/kiln.db",
		SecretKeyFile: "keys/secret.key",
		TLSCert:       "tls/api.crt",
		TLSKey:        "./tls/api.key",
		AgentBinary:   "bin/kiln-agent",
		KubeBinary:    "../kube/bin",
		SimJournal:    "journal.jsonl",
		SimState:      "sim.json",
	}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	got := Config{DataDir: cfg.DataDir, Store: cfg.Store, SecretKeyFile: cfg.SecretKeyFile, TLSCert: cfg.TLSCert,
		TLSKey: cfg.TLSKey, AgentBinary: cfg.AgentBinary, KubeBinary: cfg.KubeBinary, SimJournal: cfg.SimJournal, SimState: cfg.SimState}
	want := Config{
		DataDir:       filepath.Join(wd, ".data"),
		Store:         filepath.Join(wd, "db", "kiln.db"),
		SecretKeyFile: filepath.Join(wd, "keys", "secret.key"),
		TLSCert:       filepath.Join(wd, "tls", "api.crt"),
		TLSKey:        filepath.Join(wd, "tls", "api.key"),
		AgentBinary:   filepath.Join(wd, "bin", "kiln-agent"),
		KubeBinary:    filepath.Join(filepath.Dir(wd), "kube", "bin"),
		SimJournal:    filepath.Join(wd, "journal.jsonl"),
		SimState:      filepath.Join(wd, "sim.json"),
	}
	// Config holds netip.Addrs (LocalAddressPool), compared as values.
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("paths after start (-want +got):\n%s", diff)
	}

	pg := Config{DataDir: "d", Store: "postgres://kiln@db/kiln"}
	if err := pg.absPaths(); err != nil {
		t.Fatal(err)
	}
	if pg.Store != "postgres://kiln@db/kiln" {
		t.Errorf("--store postgres://kiln@db/kiln became %q", pg.Store)
	}
}
