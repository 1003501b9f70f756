package faults

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/postgres"
	"kiln.dev/kiln/internal/store/sqlite"
	"kiln.dev/kiln/test/kilndtest"
	"kiln.dev/kiln/test/waitfor"
)

// sigterm stops replica i with SIGTERM and checks what a graceful stop
// promises (docs/faults.md): the process exits 0 once its drain is over, and
// no lease in the store names it any more: every cluster it was working on
// is claimable at once, by another replica or by its own restart, without
// waiting for the lease to expire. Then it starts the replica again.
func (s *suite) sigterm(i int) {
	k, armed := s.stopped(i)
	pid := k.Cmd.Process.Pid
	// The worker logs its owner name just after kilnd listens.
	var owner string
	waitfor.Cond(s.t, fmt.Sprintf("replica-%d pid %d to log \"worker started\"", i, pid), time.Minute, func() (bool, error) {
		owner = workerOwner(k)
		return owner != "", nil
	})
	// What it holds just before (a sanity check of owner, and a figure).
	before, err := s.leasesOf(owner)
	if err != nil {
		s.errorf("replica-%d before SIGTERM: %v", i, err)
	}
	at := time.Now()
	k.Kill(syscall.SIGTERM)
	f := faultRecord{replica: i, pid: pid, at: at, kind: faultSIGTERM, armed: armed}
	if point, hit := faultHit(k); hit {
		// It reached its fault point during the drain: a kill, not a
		// graceful stop.
		f.kind, f.point = faultPoint, point
		s.record(f)
		s.restart(i)
		return
	}
	f.leases = len(before)
	s.record(f)
	if code := k.ExitCode(); code != 0 {
		s.errorf("replica-%d: pid %d exited with code %d after SIGTERM; want 0 (a drain, then a clean exit); log:\n%s", i, pid, code, k.LogText())
	}
	if owner == "" {
		s.errorf("replica-%d: pid %d never logged \"worker started\" with its owner; log:\n%s", i, pid, k.LogText())
	} else {
		s.checkHandedBack(f, owner, k.LogText())
	}
	s.restart(i)
}

// ownerRE finds the worker's lease owner name in its "worker started" line.
var ownerRE = regexp.MustCompile(`msg="worker started".*?\bowner=(\S+)`)

func workerOwner(k *kilndtest.Kilnd) string {
	m := ownerRE.FindStringSubmatch(k.LogText())
	if m == nil {
		return ""
	}
	return m[1]
}

// checkHandedBack fails for each cluster whose lease still names owner,
// read from the store right after the SIGTERMed process exited. The one
// exception is a run that had lost its lease already (its renewal failed
// for a whole TTL, or another replica took it); the process logged "run
// stopped: lease lost" for that cluster and had nothing to hand back.
// Another replica may have claimed a released lease before the read: that
// hides nothing, as its owner is then the new one.
func (s *suite) checkHandedBack(f faultRecord, owner, log string) {
	leases, err := s.leasesOf(owner)
	if err != nil {
		s.errorf("after %s: %v", f, err)
		return
	}
	var held []string
	for _, cl := range leases {
		if lostLease(log, "cluster="+cl.Key().String()) {
			continue
		}
		held = append(held, fmt.Sprintf("%s (token %d, expiry %s)", cl.Key(), cl.Lease.Token, cl.Lease.Expiry.Format("15:04:05.000")))
	}
	if len(held) > 0 {
		s.errorf("after %s, its leases were not handed back: they still name owner %s: %s",
			f, owner, strings.Join(held, ", "))
	}
}

// leasesOf reads from the store the clusters whose lease names owner.
func (s *suite) leasesOf(owner string) ([]*store.Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var (
		st  store.Store
		err error
	)
	if s.storeURL != "" {
		st, err = postgres.Open(ctx, s.storeURL)
	} else {
		st, err = sqlite.Open(ctx, filepath.Join(s.data, "kiln.db"))
	}
	if err != nil {
		return nil, fmt.Errorf("open the store to read its leases: %w", err)
	}
	defer st.Close()
	var held []*store.Cluster
	for tok := ""; ; {
		cls, next, err := st.ListClusters(ctx, project, store.Page{Limit: 500, Token: tok})
		if err != nil {
			return nil, fmt.Errorf("read the leases: %w", err)
		}
		for _, cl := range cls {
			if cl.Lease.Owner == owner {
				held = append(held, cl)
			}
		}
		if next == "" {
			return held, nil
		}
		tok = next
	}
}

// lostLease says whether log has the worker's "run stopped: lease lost"
// line for the cluster attribute attr (cluster=project/name).
func lostLease(log, attr string) bool {
	for line := range strings.SplitSeq(log, "\n") {
		if strings.Contains(line, `msg="run stopped: lease lost"`) &&
			(strings.Contains(line, attr+" ") || strings.HasSuffix(line, attr)) {
			return true
		}
	}
	return false
}
