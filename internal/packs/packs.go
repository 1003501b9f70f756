// Package packs applies the add-on packs of a cluster profile to a
// cluster's Kubernetes API: a chart pack with the Helm SDK (install or
// upgrade, waited for, undone when it fails; the release history in the
// cluster as Helm keeps it), a manifests pack with server-side apply (field
// manager "kiln"), waited for with Helm's readiness checks. It holds no
// state: what is applied is the cluster's status (status.profile), and
// Helm's releases.
package packs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/manifest"
	"kiln.dev/kiln/internal/secretref"
)

// FieldManager is the server-side apply manager of a manifests pack's
// fields.
const FieldManager = "kiln"

// LabelPack marks the objects of a manifests pack with the pack's name.
const LabelPack = "kiln.dev/pack"

// DefaultTimeout bounds one pack's apply, its wait for Ready included.
const DefaultTimeout = 5 * time.Minute

// Charts reads a chart archive from Kiln's registry.
type Charts interface {
	Chart(ctx context.Context, project, name, version string) ([]byte, error)
}

// Applier applies packs.
type Applier struct {
	Charts  Charts
	Timeout time.Duration // DefaultTimeout when 0
	Log     *slog.Logger
}

// Target is the cluster a pack goes to.
type Target struct {
	Config  *rest.Config // an admin of the cluster's API
	Project string       // whose charts
	// Fields are the cluster fields values may name: ${cluster.KEY}.
	Fields map[string]string
	// Secrets are the keys of the project's secrets that values and
	// manifests may name, ${secret.NAME.KEY}, keyed NAME.KEY: every key
	// of each secret the packs name that exists. A reference to one that
	// is not here fails the pack, naming it.
	Secrets map[string]string
}

// Redact is s with the value of every secret of t hidden
// (secretref.Redact): what goes into status, events and errors.
func (t Target) Redact(s string) string { return secretref.Redact(s, t.Secrets) }

// ClusterFields are the fields of a cluster that pack values may name.
func ClusterFields(name string, spec *v1.ClusterSpec) map[string]string {
	return map[string]string{
		"name": name, "podCIDR": spec.Network.PodCIDR, "serviceCIDR": spec.Network.ServiceCIDR,
		"kubernetesVersion": spec.KubernetesVersion,
	}
}

// PackError is a pack that failed: which, what it was doing, and the
// objects not Ready when it timed out.
type PackError struct {
	Pack     string
	Doing    string // "install chart local-path 0.0.30", ...
	NotReady []string
	Err      error
}

func (e *PackError) Error() string {
	msg := fmt.Sprintf("pack %s: %s: %v", e.Pack, e.Doing, e.Err)
	if len(e.NotReady) > 0 {
		msg += "; not Ready: " + strings.Join(e.NotReady, ", ")
	}
	return msg
}

func (e *PackError) Unwrap() error { return e.Err }

func (a *Applier) timeout() time.Duration {
	if a.Timeout > 0 {
		return a.Timeout
	}
	return DefaultTimeout
}

func (a *Applier) log() *slog.Logger {
	if a.Log != nil {
		return a.Log
	}
	return slog.New(slog.DiscardHandler)
}

// Apply installs pk, or upgrades it to pk when it is there, and waits until
// its workloads are Ready. When that fails, a chart's new release is undone
// (an install uninstalled, an upgrade rolled back to the release before),
// so the cluster is as it was; a manifests pack's objects stay as applied.
func (a *Applier) Apply(ctx context.Context, t Target, pk v1.Pack) (v1.PackStatus, error) {
	st := v1.PackStatus{Name: pk.Name, Version: pk.Version, Chart: pk.ChartName(), Namespace: pk.TargetNamespace()}
	var err error
	if st.Chart != "" {
		err = a.applyChart(ctx, t, pk, &st)
	} else {
		err = a.applyManifests(ctx, t, pk, &st)
	}
	st.AppliedAt = time.Now().UTC()
	if err != nil {
		st.State, st.Message = v1.PackFailed, err.Error()
		return st, err
	}
	st.State, st.Ready = v1.PackApplied, true
	return st, nil
}

func (a *Applier) helm(t Target, namespace string) (*action.Configuration, *getter, error) {
	g, err := newGetter(t.Config, namespace)
	if err != nil {
		return nil, nil, err
	}
	cfg := new(action.Configuration)
	logf := func(format string, v ...any) { a.log().Debug(fmt.Sprintf(format, v...), "namespace", namespace) }
	if err := cfg.Init(g, namespace, "secret", logf); err != nil {
		return nil, nil, err
	}
	return cfg, g, nil
}

func (a *Applier) applyChart(ctx context.Context, t Target, pk v1.Pack, st *v1.PackStatus) error {
	fail := func(doing string, err error) error { return &PackError{Pack: pk.Name, Doing: doing, Err: err} }
	data, err := a.Charts.Chart(ctx, t.Project, st.Chart, pk.Version)
	if err != nil {
		return fail("read chart "+st.Chart+" "+pk.Version, err)
	}
	chrt, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return fail("load chart "+st.Chart+" "+pk.Version, err)
	}
	vals, err := expandValues(pk.Values, t)
	if err != nil {
		return fail("values", err)
	}
	cfg, g, err := a.helm(t, st.Namespace)
	if err != nil {
		return fail("connect", err)
	}
	last, err := a.settle(cfg, pk.Name)
	if err != nil {
		return fail("read the release", err)
	}
	var rel *release.Release
	if last == nil {
		doing := "install chart " + st.Chart + " " + pk.Version
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.CreateNamespace = pk.Name, st.Namespace, true
		in.Wait, in.Timeout = true, a.timeout()
		rel, err = in.RunWithContext(ctx, chrt, vals)
		if err != nil {
			notReady := a.notReady(ctx, g, rel)
			un := action.NewUninstall(cfg)
			un.Wait, un.Timeout = true, a.timeout()
			if _, uerr := un.Run(pk.Name); uerr != nil && !errors.Is(uerr, driver.ErrReleaseNotFound) {
				a.log().Warn("uninstall a failed install", "pack", pk.Name, "err", uerr)
			}
			return &PackError{Pack: pk.Name, Doing: doing + " (uninstalled again)", NotReady: notReady, Err: err}
		}
	} else {
		doing := "upgrade chart " + st.Chart + " " + pk.Version + " (from revision " + fmt.Sprint(last.Version) + ")"
		up := action.NewUpgrade(cfg)
		up.Namespace, up.Wait, up.Timeout, up.MaxHistory = st.Namespace, true, a.timeout(), 10
		rel, err = up.RunWithContext(ctx, pk.Name, chrt, vals)
		if err != nil {
			notReady := a.notReady(ctx, g, rel)
			if rerr := a.rollback(cfg, pk.Name, last.Version); rerr != nil {
				return &PackError{Pack: pk.Name, Doing: doing, NotReady: notReady,
					Err: fmt.Errorf("%w; and the rollback to revision %d failed: %v", err, last.Version, rerr)}
			}
			return &PackError{Pack: pk.Name, Doing: doing + " (rolled back to revision " + fmt.Sprint(last.Version) + ")", NotReady: notReady, Err: err}
		}
	}
	st.Revision = rel.Version
	if rel.Info != nil {
		st.Message = strings.TrimSpace(rel.Info.Notes)
	}
	return nil
}

// settle returns the release's last revision, nil when there is none.
// A release left pending by a worker that died in the middle is first
// put back: a pending install uninstalled, a pending upgrade or rollback
// rolled back to the revision before.
func (a *Applier) settle(cfg *action.Configuration, name string) (*release.Release, error) {
	h := action.NewHistory(cfg)
	h.Max = 1
	rels, err := h.Run(name)
	if errors.Is(err, driver.ErrReleaseNotFound) || err == nil && len(rels) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	last := rels[len(rels)-1]
	switch {
	case last.Info == nil || !last.Info.Status.IsPending() && last.Info.Status != release.StatusFailed:
		return last, nil
	case last.Version == 1:
		un := action.NewUninstall(cfg)
		un.Wait, un.Timeout = true, a.timeout()
		if _, err := un.Run(name); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
			return nil, fmt.Errorf("uninstall release %s, left %s: %w", name, last.Info.Status, err)
		}
		return nil, nil
	default:
		if err := a.rollback(cfg, name, last.Version-1); err != nil {
			return nil, fmt.Errorf("roll release %s back from %s: %w", name, last.Info.Status, err)
		}
		return a.settle(cfg, name)
	}
}

func (a *Applier) rollback(cfg *action.Configuration, name string, revision int) error {
	rb := action.NewRollback(cfg)
	rb.Version, rb.Wait, rb.Timeout = revision, true, a.timeout()
	return rb.Run(name)
}

// Rollback puts a chart pack back at an earlier revision of its release
// (one that PackStatus.Revision recorded).
func (a *Applier) Rollback(ctx context.Context, t Target, st v1.PackStatus) error {
	cfg, _, err := a.helm(t, st.Namespace)
	if err != nil {
		return err
	}
	return a.rollback(cfg, st.Name, st.Revision)
}

// notReady names the objects of a release (or of list) that are not Ready.
func (a *Applier) notReady(ctx context.Context, g *getter, rel *release.Release) []string {
	if rel == nil {
		return nil
	}
	kc := kube.New(g)
	list, err := kc.Build(strings.NewReader(rel.Manifest), false)
	if err != nil {
		return nil
	}
	return a.unready(ctx, g, list)
}

func (a *Applier) unready(ctx context.Context, g *getter, list kube.ResourceList) []string {
	cs, err := kubernetes.NewForConfig(g.config)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	rc := kube.NewReadyChecker(cs, func(string, ...any) {}, kube.PausedAsReady(true))
	var out []string
	for _, info := range list {
		if ok, err := rc.IsReady(ctx, info); err == nil && !ok {
			out = append(out, info.Mapping.GroupVersionKind.Kind+" "+info.Namespace+"/"+info.Name)
		}
	}
	return out
}

func (a *Applier) applyManifests(ctx context.Context, t Target, pk v1.Pack, st *v1.PackStatus) error {
	fail := func(doing string, notReady []string, err error) error {
		return &PackError{Pack: pk.Name, Doing: doing, NotReady: notReady, Err: err}
	}
	list, g, err := a.build(t, pk, st.Namespace)
	if err != nil {
		return fail("read manifests", nil, err)
	}
	if err := a.ensureNamespace(ctx, g, st.Namespace); err != nil {
		return fail("create namespace "+st.Namespace, nil, err)
	}
	force := true
	for _, info := range list {
		data, err := yaml.Marshal(info.Object)
		if err != nil {
			return fail("apply", nil, err)
		}
		data, err = yaml.YAMLToJSON(data)
		if err != nil {
			return fail("apply", nil, err)
		}
		obj, err := resource.NewHelper(info.Client, info.Mapping).WithFieldManager(FieldManager).
			Patch(info.Namespace, info.Name, types.ApplyPatchType, data, &metav1.PatchOptions{Force: &force})
		if err != nil {
			return fail("apply "+describe(info), nil, err)
		}
		_ = info.Refresh(obj, true)
	}
	kc := kube.New(g)
	kc.Namespace = st.Namespace
	if err := kc.Wait(list, a.timeout()); err != nil {
		return fail(fmt.Sprintf("wait for %d objects to be Ready", len(list)), a.unready(ctx, g, list), err)
	}
	st.Message = fmt.Sprintf("%d objects applied", len(list))
	return nil
}

// build reads a manifests pack's objects as the cluster's API maps them,
// each labelled with the pack, namespaced ones without a namespace put in
// namespace.
func (a *Applier) build(t Target, pk v1.Pack, namespace string) (kube.ResourceList, *getter, error) {
	text, err := expand(pk.Manifests, t)
	if err != nil {
		return nil, nil, err
	}
	objs, err := manifest.Parse(text)
	if err != nil {
		return nil, nil, err
	}
	var docs bytes.Buffer
	for _, o := range objs {
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelPack] = pk.Name
		o.SetLabels(labels)
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, nil, err
		}
		docs.WriteString("---\n")
		docs.Write(b)
	}
	g, err := newGetter(t.Config, namespace)
	if err != nil {
		return nil, nil, err
	}
	kc := kube.New(g)
	kc.Namespace = namespace
	list, err := kc.Build(&docs, false)
	if err != nil {
		return nil, nil, err
	}
	return list, g, nil
}

func (a *Applier) ensureNamespace(ctx context.Context, g *getter, name string) error {
	cs, err := kubernetes.NewForConfig(g.config)
	if err != nil {
		return err
	}
	ns := []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, name))
	force := true
	_, err = cs.CoreV1().Namespaces().Patch(ctx, name, types.ApplyPatchType, ns, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	return err
}

// Remove takes pk off the cluster: a chart's release uninstalled, a
// manifests pack's objects deleted (in reverse order). What is already gone
// is not an error.
func (a *Applier) Remove(ctx context.Context, t Target, pk v1.Pack) error {
	ns := pk.TargetNamespace()
	if pk.ChartName() != "" {
		cfg, _, err := a.helm(t, ns)
		if err != nil {
			return err
		}
		un := action.NewUninstall(cfg)
		un.Wait, un.Timeout = true, a.timeout()
		if _, err := un.Run(pk.Name); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
			return &PackError{Pack: pk.Name, Doing: "uninstall release " + pk.Name, Err: err}
		}
		return nil
	}
	list, g, err := a.build(withoutMissingSecrets(t, pk), pk, ns)
	if err != nil {
		return &PackError{Pack: pk.Name, Doing: "read manifests", Err: err}
	}
	slices.Reverse(list)
	kc := kube.New(g)
	if _, errs := kc.Delete(list); len(errs) > 0 {
		return &PackError{Pack: pk.Name, Doing: "delete objects", Err: errors.Join(errs...)}
	}
	return nil
}

// withoutMissingSecrets is t with "" for each secret pk names that t does
// not have: a pack is removed by its objects' kinds and names, which a
// secret deleted since it was applied does not change.
func withoutMissingSecrets(t Target, pk v1.Pack) Target {
	refs, _ := secretref.InPack(pk)
	secrets := maps.Clone(t.Secrets)
	for _, r := range refs {
		if _, ok := secrets[r.String()]; !ok {
			if secrets == nil {
				secrets = map[string]string{}
			}
			secrets[r.String()] = ""
		}
	}
	t.Secrets = secrets
	return t
}

func describe(info *resource.Info) string {
	if info.Namespace != "" {
		return info.Mapping.GroupVersionKind.Kind + " " + info.Namespace + "/" + info.Name
	}
	return info.Mapping.GroupVersionKind.Kind + " " + info.Name
}

// fieldRef is a cluster field named in a value or a manifest.
var fieldRef = regexp.MustCompile(`\$\{cluster\.([A-Za-z]+)\}`)

// ErrNoClusterField: a value or manifest names a cluster field there is
// not. The error is a *ClusterFieldError.
var ErrNoClusterField = errors.New("no such cluster field")

// ClusterFieldError names the references of a text to cluster fields there
// are not (Refs, as written: ${cluster.zone}) and the fields there are.
type ClusterFieldError struct {
	Refs, Fields []string
}

func (e *ClusterFieldError) Error() string {
	return fmt.Sprintf("%s: %v; the fields are %s", strings.Join(e.Refs, ", "), ErrNoClusterField, strings.Join(e.Fields, ", "))
}

func (e *ClusterFieldError) Unwrap() error { return ErrNoClusterField }

// ValueError is a value of a pack that does not expand: Field is where in
// the values (values.a.b[0]), Err why (a *ClusterFieldError, secretref's
// errors).
type ValueError struct {
	Field string
	Err   error
}

func (e *ValueError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *ValueError) Unwrap() error { return e.Err }

// expand replaces each ${cluster.KEY} of s with t's field, then each
// ${secret.NAME.KEY} with t's secret (in that order: a secret's value is
// taken as it is, never expanded). An error (a *ClusterFieldError,
// secretref's *RefError or *ExpandError) names the reference, never a
// value.
func expand(s string, t Target) (string, error) {
	var bad []string
	out := fieldRef.ReplaceAllStringFunc(s, func(m string) string {
		key := fieldRef.FindStringSubmatch(m)[1]
		v, ok := t.Fields[key]
		if !ok {
			bad = append(bad, m)
		}
		return v
	})
	if len(bad) > 0 {
		return "", &ClusterFieldError{Refs: bad, Fields: slices.Sorted(maps.Keys(t.Fields))}
	}
	return secretref.Expand(out, t.Secrets)
}

// expandValues is values with every string expanded (a copy). An error, a
// *ValueError, names where the reference is: values.a.b[0].
func expandValues(values map[string]any, t Target) (map[string]any, error) {
	var walk func(at string, v any) (any, error)
	walk = func(at string, v any) (any, error) {
		switch x := v.(type) {
		case string:
			s, err := expand(x, t)
			if err != nil {
				return nil, &ValueError{Field: at, Err: err}
			}
			return s, nil
		case map[string]any:
			out := make(map[string]any, len(x))
			for _, k := range slices.Sorted(maps.Keys(x)) {
				w, err := walk(at+"."+k, x[k])
				if err != nil {
					return nil, err
				}
				out[k] = w
			}
			return out, nil
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				w, err := walk(fmt.Sprintf("%s[%d]", at, i), e)
				if err != nil {
					return nil, err
				}
				out[i] = w
			}
			return out, nil
		}
		return v, nil
	}
	if values == nil {
		return map[string]any{}, nil
	}
	out, err := walk("values", values)
	if err != nil {
		return nil, err
	}
	return out.(map[string]any), nil
}
