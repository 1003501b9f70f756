// Package backupschedule is the backend's periodic look at the clusters
// with spec.backup: a backup operation begun when the schedule says one is
// due, counted from the cluster's last scheduled backup (or its creation).
// The backup's plan prunes the scheduled backups beyond spec.backup.keep.
package backupschedule

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/store"
)

// DefaultInterval is how often the schedules are looked at.
const DefaultInterval = time.Minute

// Store is what the loop reads and writes.
type Store interface {
	store.ClusterLister
	check.Writer
	ListBackups(ctx context.Context, project, cluster string, pg store.Page) ([]*store.Backup, string, error)
}

// Options configure a Loop. Store, Watched and Steps are required.
type Options struct {
	check.Base
	Store Store
	// Watched reports whether Kiln runs the etcd of a cluster (its
	// provider's nodes run agents, its distribution is Kiln's).
	Watched func(cl *store.Cluster) bool
}

// Loop runs the schedules.
type Loop struct {
	opts Options
	acts check.Acts
}

// New returns a Loop with defaults filled in.
func New(opts Options) *Loop {
	opts.Base = opts.WithDefaults(DefaultInterval)
	return &Loop{opts: opts, acts: opts.Acts(opts.Store)}
}

// Parse reads a schedule: five cron fields, in UTC.
func Parse(schedule string) (cron.Schedule, error) {
	return cron.ParseStandard(schedule)
}

// Periodic is the check's shape: what a check.Runner runs.
func (l *Loop) Periodic() check.Periodic {
	return l.opts.Periodic("backup schedule", l)
}

// CheckAll looks at every cluster once.
func (l *Loop) CheckAll(ctx context.Context) error {
	return check.Pass(ctx, l.opts.Store, nil, l.Periodic())
}

// Check begins cl's scheduled backup when one is due. A cluster busy with
// another operation, or not Succeeded, is looked at again next time: the
// backup is late, not lost.
func (l *Loop) Check(ctx context.Context, cl *store.Cluster) error {
	b := cl.Spec.Backup
	if b == nil || b.Schedule == "" || cl.Status.ProvisioningState != v1.StateSucceeded || !l.opts.Watched(cl) {
		return nil
	}
	sched, err := Parse(b.Schedule)
	if err != nil {
		return nil // validation refuses it; an older record is left alone
	}
	last, err := l.lastScheduled(ctx, cl)
	if err != nil {
		return err
	}
	now := l.opts.Now().UTC()
	due := sched.Next(last)
	if now.Before(due) {
		return nil
	}
	name := fmt.Sprintf("%s-%s", cl.Name, now.Format("20060102-150405"))
	next := *cl
	op := &store.Operation{Kind: v1.KindBackup, Backup: name,
		Reason: fmt.Sprintf("scheduled by spec.backup.schedule %q (due at %s)", b.Schedule, due.Format(time.RFC3339))}
	_, err = l.acts.Begin(ctx, &next, cl.ETag, op, now, func() {
		l.opts.Logger.Info("backup schedule: backing up", "cluster", cl.Key().String(), "operation", op.ID, "backup", name)
		l.acts.Event(ctx, cl, "Normal", "BackupScheduled", op.ID, fmt.Sprintf("backup %s begun: %s", name, op.Reason))
	})
	return err
}

// lastScheduled is when cl's newest scheduled backup began, or when cl
// was made when it has none.
func (l *Loop) lastScheduled(ctx context.Context, cl *store.Cluster) (time.Time, error) {
	last := cl.Status.CreatedAt
	pg := store.Page{Limit: 100}
	for {
		bs, next, err := l.opts.Store.ListBackups(ctx, cl.Project, cl.Name, pg)
		if err != nil {
			return time.Time{}, fmt.Errorf("list backups of cluster %s: %w", cl.Key(), err)
		}
		for _, b := range bs { // newest first
			if b.Scheduled && b.ClusterUID == cl.UID {
				return b.CreatedAt, nil
			}
		}
		if next == "" {
			return last, nil
		}
		pg.Token = next
	}
}
