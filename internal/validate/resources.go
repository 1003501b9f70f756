package validate

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/manifest"
	"kiln.dev/kiln/internal/secretref"
)

// MaxPacks bounds a profile's add-on packs.
const MaxPacks = 100

// Profile checks a cluster profile.
func Profile(name string, p *v1.Profile) []v1.Error {
	var e errs
	e.name("name", name, MaxLabel)
	if p.Version < 1 {
		e.invalid("version", "%d must be 1 or more", p.Version)
	}
	switch {
	case p.KubernetesVersion == "":
		e.missing("kubernetesVersion", "kubernetesVersion is required, for example v1.36.3")
	case !IsKubernetesVersion(p.KubernetesVersion):
		e.invalid("kubernetesVersion", "%q must look like vMAJOR.MINOR.PATCH, for example v1.36.3", p.KubernetesVersion)
	}
	if len(p.Packs) > MaxPacks {
		e.invalid("packs", "%d packs; at most %d are supported", len(p.Packs), MaxPacks)
	}
	if p.CNI != "" && !slices.Contains(CNIs, p.CNI) {
		e.invalid("cni", "%q must be one of %s", p.CNI, strings.Join(CNIs, ", "))
	}
	seen := map[string]int{}
	for i, pk := range p.Packs {
		at := fmt.Sprintf("packs[%d]", i)
		e.name(at+".name", pk.Name, MaxLabel)
		if j, dup := seen[pk.Name]; dup {
			e.invalid(at+".name", "pack %q is already packs[%d]; a profile has each pack once", pk.Name, j)
		}
		seen[pk.Name] = i
		if pk.Version == "" {
			e.missing(at+".version", "%s.version is required", at)
		} else if len(pk.Version) > MaxLabel || strings.ContainsAny(pk.Version, " /:@\t\n") {
			e.invalid(at+".version", "%q must be a version such as 1.2.3 (no spaces, slashes, colons or @)", pk.Version)
		}
		if pk.Namespace != "" && !IsDNSLabel(pk.Namespace, MaxLabel) {
			e.invalid(at+".namespace", "%q must be a namespace name (a lower-case DNS-1123 label)", pk.Namespace)
		}
		switch {
		case pk.Chart != "" && pk.Manifests != "":
			e.invalid(at+".manifests", "a pack is a chart or manifests, not both; remove chart or manifests")
		case pk.Chart != "":
			e.name(at+".chart", pk.Chart, MaxLabel)
		case pk.Manifests != "":
			if len(pk.Manifests) > MaxManifests {
				e.invalid(at+".manifests", "%d bytes; at most %d", len(pk.Manifests), MaxManifests)
			} else if _, err := manifest.Parse(pk.Manifests); err != nil {
				e.invalid(at+".manifests", "%v", err)
			}
		}
		// ${secret.NAME.KEY}: the syntax here; whether the secret exists
		// is dynamic validation's (a cluster PUT), and the apply's.
		var se *secretref.SyntaxError
		if _, err := secretref.InPack(pk); errors.As(err, &se) {
			e.invalid(at+"."+se.Field, "%v", se.Err)
		}
	}
	return e
}

// Secret checks a project secret: its name, and data of at least one key,
// each key as Kubernetes allows a Secret's ([A-Za-z0-9._-]), each value at
// most secretref.MaxValue bytes and all of it at most secretref.MaxData.
// No message holds a value.
func Secret(name string, s *v1.Secret) []v1.Error {
	var e errs
	e.name("name", name, MaxLabel)
	if len(s.Data) == 0 {
		e.missing("data", "data is required: a map of at least one key to its value, {\"data\": {\"KEY\": \"value\"}}")
	}
	total := 0
	for _, k := range slices.Sorted(maps.Keys(s.Data)) {
		v := s.Data[k]
		total += len(k) + len(v)
		switch {
		case k == "":
			e.invalid("data", "a key must not be empty")
		case !secretref.ValidKey(k):
			e.invalid("data."+k, "key %q must be at most %d characters of A-Z, a-z, 0-9, '.', '_' and '-'", k, secretref.MaxKey)
		case len(v) > secretref.MaxValue:
			e.invalid("data."+k, "the value is %d bytes; at most %d", len(v), secretref.MaxValue)
		}
	}
	if total > secretref.MaxData {
		e.invalid("data", "keys and values are %d bytes in all; at most %d", total, secretref.MaxData)
	}
	return e
}

// MaxManifests bounds a manifests pack's text.
const MaxManifests = 1 << 20

// CloudAccount checks a cloud account.
func CloudAccount(name string, a *v1.CloudAccount, catalog Catalog) []v1.Error {
	var e errs
	providers := catalog.Providers()
	e.name("name", name, MaxLabel)
	switch {
	case a.Provider == "":
		e.missing("provider", "provider is required; one of %s", strings.Join(providers, ", "))
	case !slices.Contains(providers, a.Provider):
		e.invalid("provider", "unknown provider %q; one of %s", a.Provider, strings.Join(providers, ", "))
	}
	keys := make([]string, 0, len(a.Credentials))
	for k := range a.Credentials {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "" {
			e.invalid("credentials", "a credential name must not be empty")
		}
	}
	// A PUT without credentials keeps the stored ones: nothing to check.
	if a.Provider == v1.ProviderAzure && a.Credentials != nil {
		e = append(e, AzureCredentials(a.Credentials)...)
	}
	if a.Provider == v1.ProviderGCP && a.Credentials != nil {
		e = append(e, GCPCredentials(a.Credentials)...)
	}
	e.quotas(a.Quotas)
	return e
}

func (e *errs) quotas(quotas []v1.Quota) {
	seen := map[string]int{}
	for i, q := range quotas {
		at := fmt.Sprintf("quotas[%d]", i)
		if q.Region != "" && !IsDNSLabel(q.Region, MaxInstanceType) {
			e.invalid(at+".region", "%q must be a region name, or empty for every region without its own entry", q.Region)
		}
		if j, dup := seen[q.Region]; dup {
			e.invalid(at+".region", "region %q already has quotas[%d]; one entry per region", q.Region, j)
		}
		seen[q.Region] = i
		for _, l := range []struct {
			field string
			v     *int
		}{{"machines", q.Machines}, {"vcpus", q.VCPUs}, {"loadBalancers", q.LoadBalancers}} {
			if l.v != nil && (*l.v < 0 || *l.v > MaxQuota) {
				e.invalid(at+"."+l.field, "%d must be between 0 and %d; leave it out for no limit", *l.v, MaxQuota)
			}
		}
	}
}

// MaxQuota bounds a quota limit.
const MaxQuota = 1_000_000
