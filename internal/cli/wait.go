package cli

import (
	"cmp"

	"github.com/spf13/cobra"
)

// The rule for every command that starts an operation (or a job): it
// returns as soon as the API has recorded what was asked, printing the
// result and the operation to follow; --wait follows the operation to its
// end, showing its steps, and exits 0 only if it succeeded. A command
// gets its --wait from waitFlag, which marks it as one that starts an
// operation; TestWaitConvention walks the command tree for the rule.

// annotationStartsOperation marks a command that starts an operation.
const annotationStartsOperation = "kiln.dev/starts-operation"

// waitFlag adds --wait to cmd, with usage or the usual one.
func waitFlag(cmd *cobra.Command, wait *bool, usage string) {
	cmd.Flags().BoolVar(wait, "wait", false, cmp.Or(usage, "wait for the operation and show its steps"))
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[annotationStartsOperation] = "true"
}
