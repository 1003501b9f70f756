package storetest

import (
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testPrune: Prune deletes events and audit entries older than their
// cutoffs and tokens expired or revoked before theirs, and nothing else; a
// zero cutoff keeps its kind; a second prune finds nothing; the newest
// event is kept.
func testPrune(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	old, cutoff := epoch.Add(-48*time.Hour), epoch.Add(-24*time.Hour)
	k := store.Key{Project: "p", Name: "c"}
	for i, at := range []time.Time{old, old, old, epoch, epoch} {
		ev := &store.Event{Project: "p", Cluster: "c", Event: v1.Event{Time: at, Type: "Normal", Reason: "R", Message: string(rune('a' + i))}}
		wantErr(t, "AppendEvent", s.AppendEvent(ctx, ev), nil)
	}
	for _, at := range []time.Time{old, old, epoch} {
		wantErr(t, "AppendAudit", s.AppendAudit(ctx, &v1.AuditEntry{Time: at, Actor: "user:a", Action: "PUT /x", Result: v1.AuditSuccess, Status: 200}), nil)
	}
	for _, tok := range []*store.Token{
		{ID: "expired-long-ago", Hash: "h1", Principal: "user:a", ExpiresAt: old},
		{ID: "revoked-long-ago", Hash: "h2", Principal: "user:a", ExpiresAt: epoch.Add(48 * time.Hour), RevokedAt: old},
		{ID: "expired-lately", Hash: "h3", Principal: "user:a", ExpiresAt: epoch.Add(-time.Hour)},
		{ID: "revoked-lately", Hash: "h4", Principal: "user:a", ExpiresAt: epoch.Add(48 * time.Hour)},
		{ID: "live", Hash: "h5", Principal: "user:a", ExpiresAt: epoch.Add(48 * time.Hour)},
	} {
		wantErr(t, "CreateToken", s.CreateToken(ctx, tok), nil)
		if !tok.RevokedAt.IsZero() {
			wantErr(t, "RevokeToken", s.RevokeToken(ctx, tok.Principal, tok.ID, tok.RevokedAt), nil)
		}
	}
	wantErr(t, "RevokeToken", s.RevokeToken(ctx, "user:a", "revoked-lately", epoch.Add(-time.Hour)), nil)

	// Zero cutoffs: nothing goes.
	if got, err := s.Prune(ctx, store.Cutoffs{}); err != nil || got != (store.Pruned{}) {
		t.Fatalf("Prune with no cutoffs = %+v, %v; want nothing deleted", got, err)
	}
	got, err := s.Prune(ctx, store.Cutoffs{Events: cutoff, Audit: cutoff, Tokens: cutoff})
	wantErr(t, "Prune", err, nil)
	if want := (store.Pruned{Events: 3, Audit: 2, Tokens: 2}); got != want {
		t.Errorf("Prune = %+v, want %+v", got, want)
	}
	evs, _, err := s.ListEvents(ctx, k, store.Page{})
	wantErr(t, "ListEvents", err, nil)
	if len(evs) != 2 || evs[0].Message != "d" || evs[1].Message != "e" {
		t.Errorf("events left: %+v, want d and e", evs)
	}
	audit, _, err := s.ListAudit(ctx, store.AuditFilter{}, store.Page{})
	wantErr(t, "ListAudit", err, nil)
	if len(audit) != 1 || !audit[0].Time.Equal(epoch) {
		t.Errorf("audit left: %+v, want the newest only", audit)
	}
	toks, _, err := s.ListTokens(ctx, "user:a", store.Page{})
	wantErr(t, "ListTokens", err, nil)
	var ids []string
	for _, tok := range toks {
		ids = append(ids, tok.ID)
	}
	if want := []string{"expired-lately", "live", "revoked-lately"}; !slices.Equal(ids, want) {
		t.Errorf("tokens left: %v, want %v", ids, want)
	}
	if got, err := s.Prune(ctx, store.Cutoffs{Events: cutoff, Audit: cutoff, Tokens: cutoff}); err != nil || got != (store.Pruned{}) {
		t.Errorf("a second Prune = %+v, %v; want nothing deleted", got, err)
	}

	// Every event past its cutoff: the newest stays, so that the next
	// event's id is still larger than any given out before.
	got, err = s.Prune(ctx, store.Cutoffs{Events: epoch.Add(time.Hour)})
	wantErr(t, "Prune", err, nil)
	if want := (store.Pruned{Events: 1}); got != want {
		t.Errorf("Prune of every event = %+v, want %+v (the newest kept)", got, want)
	}
	evs, _, err = s.ListEvents(ctx, k, store.Page{})
	wantErr(t, "ListEvents", err, nil)
	if len(evs) != 1 || evs[0].Message != "e" {
		t.Fatalf("events left: %+v, want e", evs)
	}
	next := &store.Event{Project: "p", Cluster: "c", Event: v1.Event{Type: "Normal", Reason: "R"}}
	wantErr(t, "AppendEvent", s.AppendEvent(ctx, next), nil)
	if next.ID <= evs[0].ID {
		t.Errorf("event after a prune got id %d, not above %d", next.ID, evs[0].ID)
	}
}
