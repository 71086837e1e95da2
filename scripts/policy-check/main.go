// Command policy-check tells which spec.managementPolicies sets a managed resource
// reconciler accepts, using crossplane-runtime's own resolver at the version the pinned
// provider-kubernetes requires (scripts/crossplane-tools builds it so). provider-kubernetes
// passes no supported list of its own (managed.WithManagementPolicies()), so the
// runtime's default list is the one its Objects are checked against; a set outside it
// leaves the Object Synced=False and unobserved, and skips its deletion.
//
// Input (stdin): a JSON array of sets, each an array of actions, e.g.
// [["Observe","Delete"],["*"]]. Output (stdout): a JSON array of the same length, ""
// where the set is accepted and the resolver's error otherwise.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
)

func main() {
	var sets [][]xpv2.ManagementAction
	if err := json.NewDecoder(os.Stdin).Decode(&sets); err != nil {
		fmt.Fprintln(os.Stderr, "policy-check: stdin is not a JSON array of arrays of actions:", err)
		os.Exit(2)
	}
	verdicts := make([]string, len(sets))
	for i, s := range sets {
		if err := managed.NewManagementPoliciesResolver(true, xpv2.ManagementPolicies(s)).Validate(); err != nil {
			verdicts[i] = err.Error()
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(verdicts); err != nil {
		fmt.Fprintln(os.Stderr, "policy-check:", err)
		os.Exit(1)
	}
}
