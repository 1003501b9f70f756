package sim

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
)

func TestJournalRecordsEveryAttempt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	s := New(WithJournal(path))
	c := provider.Cluster{Project: "p", Name: "c", Spec: v1.ClusterSpec{
		Labels: map[string]string{LabelFailStep: "ensure-network"}}}
	if err := s.BeforeStep(t.Context(), c, "ensure-network"); err == nil {
		t.Fatal("first attempt: want the injected failure")
	}
	if err := s.BeforeStep(t.Context(), c, "ensure-network"); err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []JournalEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e JournalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if len(got) != 2 {
		t.Fatalf("journal has %d entries, want 2 (failed attempts count too)", len(got))
	}
	for _, e := range got {
		if e.Cluster != "p/c" || e.Step != "ensure-network" || e.PID != os.Getpid() || e.End.Before(e.Start) {
			t.Errorf("bad entry %+v", e)
		}
	}
}
