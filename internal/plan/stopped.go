package plan

import "kiln.dev/kiln/internal/plan/machines"

// StopReporter is an optional capability of a provider whose machines can
// stop by themselves (the local provider's agent processes; docker's
// containers): StoppedMachines returns the cluster's machines whose agent is
// not running, and how each stopped. The steps that wait for nodes use it
// (machines.Work.WatchMachines): each attempt first starts again the machines it waits for
// that have stopped, and fails at once, retryable, when one stops while it
// waits, instead of waiting out its timeout. Check for it with a type
// assertion.
type StopReporter = machines.StopReporter
