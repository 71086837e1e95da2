// Command policy-check tells which spec.managementPolicies sets a managed resource
// reconciler accepts, and what it does when the external resource is missing, using
// crossplane-runtime's own code at the version the pinned provider-kubernetes requires
// (scripts/crossplane-tools builds it so). provider-kubernetes passes no supported list of
// its own (managed.WithManagementPolicies()), so the runtime's default list is the one its
// Objects are checked against; a set outside it leaves the Object Synced=False and
// unobserved, and skips its deletion.
//
// Input (stdin): a JSON array of sets, each an array of actions, e.g.
// [["Observe","Delete"],["*"]]. Output (stdout): a JSON array of the same length.
//
//	policy-check          "" where the set is accepted, else the resolver's error.
//	policy-check missing  for each set, one reconcile by the runtime's managed.Reconciler
//	                      of a managed resource (not being deleted) whose external client
//	                      observes no external resource (provider-kubernetes' Observe on a
//	                      NotFound remote object: ResourceExists false): {"created": whether
//	                      it called Create, "deleted": whether it called Delete, "synced":
//	                      the Synced condition it wrote ({"status", "reason", "message"};
//	                      null when none)}.
//	policy-check deleting the same for a managed resource being deleted whose external
//	                      resource exists (does deleting the Object delete the remote one).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	"github.com/crossplane/crossplane-runtime/v2/pkg/resource/fake"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
)

type synced struct {
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type outcome struct {
	Created bool    `json:"created"`
	Deleted bool    `json:"deleted"`
	Synced  *synced `json:"synced"`
}

// reconcileOnce runs one reconcile of a managed resource with policies p: one whose
// external resource does not exist, or (deleting) one being deleted whose external
// resource exists.
func reconcileOnce(p []xpv2.ManagementAction, deleting bool) (outcome, error) {
	var out outcome
	c := &test.MockClient{
		MockGet: test.NewMockGetFn(nil, func(obj client.Object) error {
			mg := obj.(*fake.ModernManaged)
			mg.SetName("observer")
			mg.SetManagementPolicies(xpv2.ManagementPolicies(p))
			if deleting {
				now := metav1.Now()
				mg.SetDeletionTimestamp(&now)
			}
			return nil
		}),
		MockUpdate: test.NewMockUpdateFn(nil),
		MockStatusUpdate: test.MockSubResourceUpdateFn(func(_ context.Context, obj client.Object, _ ...client.SubResourceUpdateOption) error {
			cond := obj.(*fake.ModernManaged).GetCondition(xpv2.TypeSynced)
			if cond.Type == xpv2.TypeSynced {
				out.Synced = &synced{string(cond.Status), string(cond.Reason), cond.Message}
			}
			return nil
		}),
	}
	r := managed.NewReconciler(
		&fake.Manager{Client: c, Scheme: fake.SchemeWith(&fake.ModernManaged{})},
		resource.ManagedKind(fake.GVK(&fake.ModernManaged{})),
		managed.WithPollInterval(time.Minute),
		managed.WithInitializers(),
		managed.WithManagementPolicies(),
		managed.WithExternalConnector(managed.ExternalConnectorFn(func(context.Context, resource.Managed) (managed.ExternalClient, error) {
			return &managed.ExternalClientFns{
				ObserveFn: func(context.Context, resource.Managed) (managed.ExternalObservation, error) {
					return managed.ExternalObservation{ResourceExists: deleting, ResourceUpToDate: deleting}, nil
				},
				CreateFn: func(context.Context, resource.Managed) (managed.ExternalCreation, error) {
					out.Created = true
					return managed.ExternalCreation{}, nil
				},
				UpdateFn: func(context.Context, resource.Managed) (managed.ExternalUpdate, error) {
					return managed.ExternalUpdate{}, nil
				},
				DeleteFn: func(context.Context, resource.Managed) (managed.ExternalDelete, error) {
					out.Deleted = true
					return managed.ExternalDelete{}, nil
				},
				DisconnectFn: func(context.Context) error { return nil },
			}, nil
		})),
	)
	_, err := r.Reconcile(context.Background(), reconcile.Request{})
	return out, err
}

func main() {
	var sets [][]xpv2.ManagementAction
	if err := json.NewDecoder(os.Stdin).Decode(&sets); err != nil {
		fmt.Fprintln(os.Stderr, "policy-check: stdin is not a JSON array of arrays of actions:", err)
		os.Exit(2)
	}
	var out any
	if mode := ""; len(os.Args) > 1 {
		mode = os.Args[1]
		if mode != "missing" && mode != "deleting" {
			fmt.Fprintln(os.Stderr, "policy-check: the mode is missing or deleting, not", mode)
			os.Exit(2)
		}
		results := make([]outcome, len(sets))
		for i, s := range sets {
			m, err := reconcileOnce(s, mode == "deleting")
			if err != nil {
				fmt.Fprintln(os.Stderr, "policy-check: reconcile:", err)
				os.Exit(1)
			}
			results[i] = m
		}
		out = results
	} else {
		verdicts := make([]string, len(sets))
		for i, s := range sets {
			if err := managed.NewManagementPoliciesResolver(true, xpv2.ManagementPolicies(s)).Validate(); err != nil {
				verdicts[i] = err.Error()
			}
		}
		out = verdicts
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "policy-check:", err)
		os.Exit(1)
	}
}
