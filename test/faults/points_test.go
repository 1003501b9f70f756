package faults

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/plan"
)

// armOneIn is how often a restarted replica is armed with a random fault
// point: one restart in armOneIn.
const armOneIn = 2

// armedGrace is how long the loop leaves an armed replica to reach its
// point before it may stop it like any other (it stops unarmed ones first).
const armedGrace = 10 * time.Second

// providerMethods are the provider calls the plan runner marks with
// provider.<Method>.before|after (docs/faults.md).
var providerMethods = []string{"EnsureNetwork", "DeleteNetwork", "EnsureMachine", "ListMachines",
	"DeleteMachine", "EnsureLoadBalancer", "DeleteLoadBalancer"}

// randomPoint is a fault spec the load reaches: a step of the create,
// update or delete plan at one of its three points, a provider call before
// or after, or any step's checkpoint, with a hit count of 1 to 3.
func randomPoint() string {
	var steps []string
	for _, kind := range []string{v1.KindCreate, v1.KindUpdate, v1.KindDelete} {
		for _, st := range plan.Steps(kind) {
			if !slices.Contains(steps, st) {
				steps = append(steps, st)
			}
		}
	}
	n := 1 + rand.IntN(3)
	switch rand.IntN(5) {
	case 0, 1:
		where := []string{"after-start", "before-checkpoint", "after-checkpoint"}[rand.IntN(3)]
		return fmt.Sprintf("step.%s.%s:%d", steps[rand.IntN(len(steps))], where, n)
	case 2, 3:
		when := []string{"before", "after"}[rand.IntN(2)]
		return fmt.Sprintf("provider.%s.%s:%d", providerMethods[rand.IntN(len(providerMethods))], when, n)
	default:
		return fmt.Sprintf("step.*.%s:%d", []string{"before-checkpoint", "after-checkpoint"}[rand.IntN(2)], 1+rand.IntN(8))
	}
}
