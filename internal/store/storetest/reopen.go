package storetest

import (
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// Reopen checks that migrations apply once and data survives closing and
// opening the store again. open must open the same database every call.
func Reopen(t *testing.T, open func() (store.Store, error)) {
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutProject(t.Context(), &v1.Project{Name: "p"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = open()
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.GetProject(t.Context(), "p"); err != nil {
		t.Fatalf("project after reopen: %v", err)
	}
}
