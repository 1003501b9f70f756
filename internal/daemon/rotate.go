package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"kiln.dev/kiln/internal/secret"
	"kiln.dev/kiln/internal/store"
)

// DefaultSettle is how long RotateKey waits, by default, between adding the
// new key and resealing.
const DefaultSettle = 2 * time.Second

// RotateOptions configures RotateKey.
type RotateOptions struct {
	// Out receives what RotateKey does, one line a step.
	Out io.Writer
	// Settle is how long to wait after adding the new key before the first
	// reseal pass, so that writes running kilnd processes sealed under the
	// old key just before they saw the new one have committed (they see it
	// on their next write: the keyring checks its file before every seal).
	// Default DefaultSettle.
	Settle time.Duration
	// StopAfter, when positive, makes RotateKey return ErrRotationStopped
	// after resealing that many records, leaving the rotation half done
	// (for tests of resuming it).
	StopAfter int
}

// ErrRotationStopped is returned by RotateKey when RotateOptions.StopAfter
// stopped it.
var ErrRotationStopped = errors.New("rotation stopped before it finished, as --stop-after asked: run kilnd rotate-key again to finish it")

// RotateKey re-encrypts every secret in cfg's store under a new key, while
// kilnd processes keep running on the same store and key file:
//
//  1. If the key file holds one key, add a new primary (the old key stays to
//     open what it sealed). If it holds more, an earlier rotation was
//     interrupted: go on with its primary.
//  2. Wait Settle, so running processes seal under the new key.
//  3. Reseal every record not under the primary (values in clear too), pass
//     after pass, until a pass finds none.
//  4. Drop the other keys from the file.
//
// Each step can be interrupted and the whole run again finishes the job.
// Run one RotateKey at a time.
func RotateKey(ctx context.Context, cfg Config, opts RotateOptions) error {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Settle == 0 {
		opts.Settle = DefaultSettle
	}
	if cfg.DataDir == "" && (cfg.Store == "" || cfg.SecretKeyFile == "") {
		return errors.New("--data-dir is required (or both --store and --secret-key-file)")
	}
	if err := cfg.absPaths(); err != nil {
		return err
	}
	st, kr, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	rs, ok := st.(store.Resealer)
	if !ok {
		return fmt.Errorf("the %T store cannot reseal", st)
	}
	r := &rotation{out: opts.Out, kr: kr, rs: rs}
	if _, err := r.report(ctx, "before"); err != nil {
		return err
	}
	if err := r.ensureNewPrimary(); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "waiting %s for running kilnd processes to seal under key %s\n", opts.Settle, kr.Primary())
	select {
	case <-time.After(opts.Settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := r.resealAll(ctx, opts.StopAfter); err != nil {
		return err
	}
	stale, err := r.report(ctx, "after")
	if err != nil {
		return err
	}
	if stale > 0 {
		// A process that had not seen the new key wrote after the last pass.
		return fmt.Errorf("%s not under key %s after the reseal; the old keys stay: run kilnd rotate-key again",
			secrets(stale), kr.Primary())
	}
	return r.dropOld(ctx)
}

// rotation is one run of RotateKey.
type rotation struct {
	out      io.Writer
	kr       *secret.Keyring
	rs       store.Resealer
	resealed int
}

// ensureNewPrimary adds a primary key unless an interrupted rotation left
// one (the file holds more than one key).
func (r *rotation) ensureNewPrimary() error {
	ids := r.kr.IDs()
	if len(ids) > 1 {
		fmt.Fprintf(r.out, "resuming an interrupted rotation: key file %s holds new key %s and old keys %s\n",
			r.kr.Path(), ids[0], strings.Join(ids[1:], ", "))
		return nil
	}
	id, err := r.kr.AddPrimary()
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "added key %s to %s as the primary; old key %s stays until every secret is resealed\n",
		id, r.kr.Path(), ids[0])
	return nil
}

// resealAll reseals until a pass finds nothing left to reseal, or, with
// stopAfter > 0, until stopAfter records are resealed.
func (r *rotation) resealAll(ctx context.Context, stopAfter int) error {
	for pass := 1; ; pass++ {
		limit := 0
		if stopAfter > 0 {
			limit = stopAfter - r.resealed
		}
		n, err := r.rs.Reseal(ctx, limit)
		r.resealed += n
		if err != nil {
			return fmt.Errorf("reseal (%s resealed so far; run kilnd rotate-key again to go on): %w", secrets(r.resealed), err)
		}
		fmt.Fprintf(r.out, "pass %d: resealed %s under key %s\n", pass, secrets(n), r.kr.Primary())
		if stopAfter > 0 && r.resealed >= stopAfter {
			fmt.Fprintf(r.out, "stopping after %s, as asked\n", secrets(r.resealed))
			return ErrRotationStopped
		}
		if n == 0 {
			return nil
		}
	}
}

// dropOld removes every key but the primary from the file, once no secret
// is sealed under them.
func (r *rotation) dropOld(ctx context.Context) error {
	backups, err := r.rs.BackupKeys(ctx)
	if err != nil {
		return err
	}
	var needed []string
	for _, id := range slices.Sorted(maps.Keys(backups)) {
		if id != r.kr.Primary() {
			needed = append(needed, fmt.Sprintf("key %s (%d backups)", id, backups[id]))
		}
	}
	if len(needed) > 0 {
		// A backup's object is sealed once, where it is kept: its key stays
		// until the backup is deleted (or pruned).
		fmt.Fprintf(r.out, "old keys stay in %s: backups are sealed under %s; run kilnd rotate-key again once they are deleted\n",
			r.kr.Path(), strings.Join(needed, ", "))
		fmt.Fprintf(r.out, "done: %s resealed; every secret in the store is sealed under key %s\n", secrets(r.resealed), r.kr.Primary())
		return nil
	}
	dropped, err := r.kr.DropRetired()
	if err != nil {
		return err
	}
	if len(dropped) == 0 {
		fmt.Fprintf(r.out, "no old keys to drop\n")
	} else {
		fmt.Fprintf(r.out, "dropped old keys %s from %s\n", strings.Join(dropped, ", "), r.kr.Path())
	}
	fmt.Fprintf(r.out, "done: %s resealed; every secret is sealed under key %s\n", secrets(r.resealed), r.kr.Primary())
	return nil
}

// report prints how many secrets each key seals, and returns how many are
// not under the primary (under another key, or in clear).
func (r *rotation) report(ctx context.Context, when string) (stale int, err error) {
	counts, err := r.rs.SealedKeys(ctx)
	if err != nil {
		return 0, err
	}
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		name := "key " + id
		if id == "" {
			name = "in clear"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", name, counts[id]))
		if id != r.kr.Primary() {
			stale += counts[id]
		}
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	fmt.Fprintf(r.out, "secrets %s: %s\n", when, strings.Join(parts, ", "))
	return stale, nil
}
