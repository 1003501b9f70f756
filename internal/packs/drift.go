package packs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/storage/driver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/resource"

	v1 "kiln.dev/kiln/api/v1"
)

// DriftManager is the field manager of the drift check's dry runs.
const DriftManager = "kiln-drift"

// Check is what a look at one applied pack found.
type Check struct {
	// Drift names the pack's objects changed or deleted by hand: "Deployment
	// web/web deleted", "Deployment web/web: .spec.replicas changed by
	// kubectl".
	Drift []string
	// NotReady names its workloads that are not Ready.
	NotReady []string
}

// Check compares what runs of pk with what it applies. An object is
// deleted when it is not there; changed when a server-side apply of it
// (a dry run, not forced) conflicts with another field manager, which is
// the one that changed the field to another value. Fields added by hand
// are not drift.
func (a *Applier) Check(ctx context.Context, t Target, pk v1.Pack) (Check, error) {
	ns := pk.TargetNamespace()
	var list kube.ResourceList
	var g *getter
	if pk.ChartName() != "" {
		cfg, gg, err := a.helm(t, ns)
		if err != nil {
			return Check{}, err
		}
		g = gg
		rel, err := action.NewGet(cfg).Run(pk.Name)
		if errors.Is(err, driver.ErrReleaseNotFound) {
			return Check{Drift: []string{"Helm release " + ns + "/" + pk.Name + " deleted"}}, nil
		}
		if err != nil {
			return Check{}, fmt.Errorf("read release %s: %w", pk.Name, err)
		}
		if list, err = kube.New(g).Build(strings.NewReader(rel.Manifest), false); err != nil {
			return Check{}, fmt.Errorf("read release %s's objects: %w", pk.Name, err)
		}
	} else {
		var err error
		if list, g, err = a.build(t, pk, ns); err != nil {
			return Check{}, err
		}
	}
	var c Check
	force := false
	for _, info := range list {
		desired, err := json.Marshal(info.Object)
		if err != nil {
			return Check{}, err
		}
		h := resource.NewHelper(info.Client, info.Mapping)
		if _, err := h.Get(info.Namespace, info.Name); apierrors.IsNotFound(err) {
			c.Drift = append(c.Drift, describe(info)+" deleted")
			continue
		} else if err != nil {
			return Check{}, fmt.Errorf("read %s: %w", describe(info), err)
		}
		_, err = h.DryRun(true).WithFieldManager(DriftManager).
			Patch(info.Namespace, info.Name, types.ApplyPatchType, desired, &metav1.PatchOptions{Force: &force})
		if apierrors.IsConflict(err) {
			c.Drift = append(c.Drift, describe(info)+": "+conflicts(err))
		} else if err != nil {
			return Check{}, fmt.Errorf("compare %s: %w", describe(info), err)
		}
	}
	c.NotReady = a.unready(ctx, g, list)
	return c, nil
}

// conflicts says which fields an apply conflict names, and who changed
// them: ".spec.replicas changed by kubectl".
func conflicts(err error) string {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil || len(st.Status().Details.Causes) == 0 {
		return "changed (" + err.Error() + ")"
	}
	var parts []string
	for _, c := range st.Status().Details.Causes {
		who := c.Message
		if i := strings.Index(who, `with "`); i >= 0 {
			who = who[i+len(`with "`):]
			who = who[:strings.IndexByte(who+`"`, '"')]
		}
		parts = append(parts, c.Field+" changed by "+who)
	}
	return strings.Join(parts, ", ")
}
