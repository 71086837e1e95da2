// Command ssa-check replays, with the API server's own field manager, what happens to a
// composed provider-kubernetes Object between Crossplane and crossplane-runtime, and
// prints the value left at a field path.
//
// Input (stdin, JSON): {"desired": <Object>, "path": ["spec", ...], "value": "<string>"}.
// Steps, on one live object:
//  1. Crossplane applies "desired" (server-side apply, force, its per-XR field owner:
//     crossplane v2.4.0 internal/controller/apiextensions/composite, composition_functions.go);
//  2. crossplane-runtime persists the provider's in-memory object with Update (the
//     external-create annotations, the finalizer) after provider-kubernetes' Observe set
//     "path" to "value" (patchesFrom);
//  3. Crossplane applies "desired" again (the next reconcile of the XR).
//
// Output (stdout, JSON): {"afterUpdate": v, "afterApply": v}, each the string at "path"
// after step 2 and step 3, or null when the field is absent.
//
// The field manager is k8s.io/apimachinery's managedfields (the code the API server runs)
// with a deduced schema: the Object CRD's spec.forProvider.manifest is
// x-kubernetes-preserve-unknown-fields, whose fields the API server tracks the same way.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/managedfields/managedfieldstest"
)

const (
	// Crossplane's owner is "apiextensions.crossplane.io/composed/<hash of the XR>".
	xrOwner       = "apiextensions.crossplane.io/composed/ssa-check"
	providerOwner = "crossplane-kubernetes-provider"
)

type input struct {
	Desired map[string]interface{} `json:"desired"`
	Path    []string               `json:"path"`
	Value   string                 `json:"value"`
}

func at(obj *unstructured.Unstructured, path []string) interface{} {
	v, found, err := unstructured.NestedFieldNoCopy(obj.Object, path...)
	if err != nil || !found {
		return nil
	}
	return v
}

func run() (map[string]interface{}, error) {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		return nil, fmt.Errorf("cannot decode the input: %w", err)
	}
	desired := &unstructured.Unstructured{Object: in.Desired}
	f := managedfieldstest.NewTestFieldManager(managedfields.NewDeducedTypeConverter(), desired.GroupVersionKind())
	if err := f.Apply(desired.DeepCopy(), xrOwner, true); err != nil {
		return nil, fmt.Errorf("first apply: %w", err)
	}
	patched := f.Live().(*unstructured.Unstructured).DeepCopy()
	if err := unstructured.SetNestedField(patched.Object, in.Value, in.Path...); err != nil {
		return nil, fmt.Errorf("cannot set %v: %w", in.Path, err)
	}
	if err := f.Update(patched, providerOwner); err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	out := map[string]interface{}{"afterUpdate": at(f.Live().(*unstructured.Unstructured), in.Path)}
	if err := f.Apply(desired.DeepCopy(), xrOwner, true); err != nil {
		return nil, fmt.Errorf("second apply: %w", err)
	}
	out["afterApply"] = at(f.Live().(*unstructured.Unstructured), in.Path)
	return out, nil
}

func main() {
	out, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ssa-check:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "ssa-check:", err)
		os.Exit(1)
	}
}
