package machines

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// ForceDeleteMachines deletes every machine whose role matches, going on
// past failures, which it returns together. Node records stay until the
// cluster's records go at the end.
func (w Work) ForceDeleteMachines(ctx context.Context, match func(role string) bool) error {
	ms, err := w.r.Provider().ListMachines(ctx, w.r.ProviderCluster())
	if err != nil {
		return fmt.Errorf("list machines: %w", err)
	}
	var errs []error
	for _, m := range ms {
		if !match(m.Role) {
			continue
		}
		w.r.Log().Info("deleting machine (forced)", "machine", m.Name)
		if err := w.r.Provider().DeleteMachine(ctx, w.r.ProviderCluster(), m.Name); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, fmt.Errorf("delete machine %q: %w", m.Name, err))
		}
	}
	if err := w.ForgetNodes(ctx, match); err != nil {
		errs = append(errs, err)
	}
	return joinFailures(errs)
}

// ForgetNodes refuses the certificates of the nodes whose role matches,
// where the cluster's nodes run agents.
func (w Work) ForgetNodes(ctx context.Context, match func(role string) bool) error {
	f := w.r.Forgetter()
	if f == nil {
		return nil
	}
	nodes, err := w.r.Nodes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		if match(nodes[name].Role) {
			if err := f.ForgetNode(ctx, w.cl.Key(), name, w.revocation("the cluster is being deleted (forced)")); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// joinFailures is one error for several: retryable if any is, with every
// message.
func joinFailures(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	out := &failure.Error{Code: v1.CodeProviderError, Err: errors.Join(errs...)}
	var msgs []string
	for _, err := range errs {
		fe := failure.From(err)
		out.Retryable = out.Retryable || fe.Retryable
		msgs = append(msgs, fe.Message)
	}
	out.Message = strings.Join(msgs, "; ")
	return out
}
