package shortpath

import (
	"os"
	"path/filepath"
	"testing"
)

// A link names its target, stays the same for the same target, and the links of
// kubelets whose directories are gone are removed at the next Link; those of live
// directories and other files stay.
func TestLinkSweepsDanglingLinks(t *testing.T) {
	tmp := t.TempDir()
	live, gone := filepath.Join(t.TempDir(), "live"), filepath.Join(t.TempDir(), "gone")
	for _, d := range []string{live, gone} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	liveLink, err := Link(tmp, live)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.Readlink(liveLink); got != live || len(filepath.Base(liveLink)) > 30 {
		t.Fatalf("link %s -> %q, want a short name for %s", liveLink, got, live)
	}
	goneLink, err := Link(tmp, gone)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(tmp, "other-link")
	if err := os.Symlink(filepath.Join(tmp, "nowhere"), other); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}

	again, err := Link(tmp, live)
	if err != nil || again != liveLink {
		t.Fatalf("Link again = %s, %v; want %s", again, err, liveLink)
	}
	if _, err := os.Lstat(goneLink); !os.IsNotExist(err) {
		t.Errorf("the link of a directory that is gone is still there (%v)", err)
	}
	for _, p := range []string{liveLink, other} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	if n := Sweep(tmp); n != 0 {
		t.Errorf("a second sweep removed %d links, want 0", n)
	}
}
