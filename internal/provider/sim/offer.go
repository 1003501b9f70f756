package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"slices"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// What the sim offers, like a small cloud: two regions of three zones,
// three instance types, spot capacity and load balancers. Its machines get
// addresses in NodeNetwork.
var (
	Regions       = []string{"sim-east", "sim-west"}
	DefaultRegion = "sim-east"
	InstanceTypes = []provider.InstanceType{
		{Name: "small", VCPUs: 2, MemoryMiB: 4096},
		{Name: "medium", VCPUs: 4, MemoryMiB: 16384},
		{Name: "large", VCPUs: 16, MemoryMiB: 65536},
	}
	DefaultInstanceType = "small"
	NodeNetwork         = netip.MustParsePrefix("10.0.0.0/16")
	// KubernetesVersions are the versions the sim pretends to install.
	KubernetesVersions = []string{"v1.34.8", "v1.35.5", "v1.36.3"}
)

// Credentials of a sim cloud account: an access key id and its secret, as a
// cloud would issue them. The sim accepts a pair when the secret is
// SecretFor(the id), and refuses anything else with InvalidCredentials.
const (
	CredentialKeyID  = "accessKeyId"
	CredentialSecret = "secretAccessKey"
)

// SecretFor returns the secret the sim accepts for an access key id. Tests
// and demos make working sim accounts with it.
func SecretFor(keyID string) string {
	sum := sha256.Sum256([]byte("kiln-sim-secret:" + keyID))
	return "simsk_" + hex.EncodeToString(sum[:16])
}

// Distributions says the sim installs nothing real: no distribution, and
// the versions it pretends to install.
func (s *Sim) Distributions() map[string][]string {
	return map[string][]string{"": slices.Clone(KubernetesVersions)}
}

// Describe checks the account's credentials and returns what the sim
// offers in region ("" is DefaultRegion).
func (s *Sim) Describe(ctx context.Context, a *provider.Account, region string) (provider.Offer, error) {
	if err := wait(ctx, s.latency); err != nil {
		return provider.Offer{}, err
	}
	if a != nil {
		if err := checkCredentials(a); err != nil {
			return provider.Offer{}, err
		}
	}
	if region == "" {
		region = DefaultRegion
	}
	o := provider.Offer{
		Regions:             slices.Clone(Regions),
		Spot:                true,
		InstanceTypes:       slices.Clone(InstanceTypes),
		DefaultInstanceType: DefaultInstanceType,
		LoadBalancers:       true,
		NodeNetwork:         NodeNetwork,
	}
	if slices.Contains(Regions, region) {
		o.Zones = []string{region + "-1", region + "-2", region + "-3"}
	}
	return o, nil
}

// Regions are the sim's regions, the same for every account
// (provider.FixedRegions).
func (s *Sim) Regions() []string { return slices.Clone(Regions) }

func checkCredentials(a *provider.Account) error {
	id, secret := a.Credentials[CredentialKeyID], a.Credentials[CredentialSecret]
	switch {
	case id == "" || secret == "":
		return failure.Terminal(v1.CodeInvalidCredentials,
			"cloud account %q has no sim credentials: set %s and %s", a.Name, CredentialKeyID, CredentialSecret)
	case secret != SecretFor(id):
		return failure.Terminal(v1.CodeInvalidCredentials,
			"the sim provider refused the credentials of cloud account %q: the secret of access key %q does not match; update the account's credentials", a.Name, id)
	}
	return nil
}
