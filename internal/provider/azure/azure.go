// Package azure is the provider whose clusters run in Microsoft Azure, made
// with the official SDK for Go (azcore, azidentity, armresources,
// armnetwork, armcompute) unmodified: the cluster's network, in the layout
// Cluster API's Azure provider makes, and its machines as virtual machines.
// The API server's load balancer is a Standard load balancer on a public
// IP (lb.go); Services of type LoadBalancer get frontends of another,
// "kubernetes", as cloud-provider-azure gives them (servicelb.go). Each
// cluster has a user-assigned managed identity its machines carry, with
// the least roles at its group (identity.go), and the dry run names an
// action the account may not perform (permissions.go). kilnd registers it
// with --azure (internal/daemon).
//
// Everything of a cluster is in a resource group of its own, named from its
// project and name (GroupName) and tagged with its identity (TagCluster):
// found again by that name, checked by that tag, deleted with everything in
// it. Inside the group every resource has a fixed name, so an ensure run
// again (a retried step, a kilnd restarted in the middle) finds what the
// first made: ARM's PUT of a name is idempotent, and nothing can be made
// twice. Long-running operations keep their pollers' resume tokens in the
// step's checkpoint (lro.go), so that the step run again resumes them
// rather than writing again. docs/provider-azure.md says what is made and
// why.
//
// A cloud account of provider azure holds the credentials (v1.Azure*
// names): an application of a Microsoft Entra ID tenant and its client
// secret, the subscription, and optionally another cloud (endpoint,
// authorityHost, caBundle: a sovereign cloud, or the local Azure of
// test/cloud/azure) reached through a cloud.Configuration, as the aws
// provider takes an endpoint from its account.
package azure

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/authorization/armauthorization/v2"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/msi/armmsi"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/validate"
)

// Name is the provider's name in spec.provider and a cloud account's
// provider.
const Name = v1.ProviderAzure

// DefaultRegion is the region of a cluster whose spec and account name none.
const DefaultRegion = "eastus"

// Tags on the group and everything in it. Azure's tag names may not hold
// "/", so Kiln's names use "_" where the aws provider's have "/" (as
// Cluster API's Azure provider does with its own).
const (
	TagCluster = "kiln.dev_cluster-id" // the cluster's id (its UID): what the group is checked by
	TagProject = "kiln.dev_project"
	TagName    = "kiln.dev_cluster"
	TagPart    = "kiln.dev_part" // which part of the cluster it is: group, vnet, nsg-control-plane, ...
)

// APIServerPort is the port of every control-plane machine's API server.
const APIServerPort = 6443

// Options configure the network part.
type Options struct {
	// HTTPClient is the SDK's transport (ARM's and Entra ID's); default
	// the SDK's. An account's caBundle replaces its TLS roots.
	HTTPClient *http.Client
	// MaxRetries is how many times the SDK tries again a call that ARM
	// throttled (429, waiting as its Retry-After says) or failed with a
	// 5xx, before the step sees the error; default 3.
	MaxRetries int32
	// PollFrequency is how often a long-running operation is polled when
	// ARM's answer has no Retry-After; default 5s.
	PollFrequency time.Duration
	// WaitTimeout bounds the wait for one long-running operation within
	// a step's attempt; then the step is retried (and finds what the
	// operation made). Default 20 minutes.
	WaitTimeout time.Duration
	// Versions are the Kubernetes versions machines install, oldest
	// first: a cluster whose spec names none boots the newest.
	Versions []string
	// BootScript is what a machine boots with; default the node image's
	// kiln-agent fetching the join files from the staging blob when the
	// account names a staging storage account (bootscript.Staged), else
	// with them inline (bootscript.Inline).
	BootScript BootScript
	// Logger gets operator logs; default discarded.
	Logger *slog.Logger
}

// Azure makes and deletes clusters' networks and machines in Azure: the
// parts of the azure provider that exist so far (provider.Provider). It is
// safe for concurrent use.
type Azure struct {
	opts Options
	log  *slog.Logger
	// pools holds a lock per cluster's pool (poolLock).
	pools sync.Map
	// locks holds a lock per cluster and shared resource that calls
	// read, change and write back (lockOf: its Services' load balancer,
	// its security groups).
	locks sync.Map
}

// New returns the network part of the azure provider.
func New(opts Options) *Azure {
	if opts.MaxRetries == 0 {
		opts.MaxRetries = 3
	}
	if opts.PollFrequency == 0 {
		opts.PollFrequency = 5 * time.Second
	}
	if opts.WaitTimeout == 0 {
		opts.WaitTimeout = 20 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BootScript == nil {
		opts.BootScript = agentBoot
	}
	return &Azure{opts: opts, log: opts.Logger}
}

// clients are the SDK's clients for one account.
type clients struct {
	account string
	groups  *armresources.ResourceGroupsClient
	net     *armnetwork.ClientFactory
	compute *armcompute.ClientFactory
	// identities and assignments are the cluster's managed identity's
	// (identity.go).
	identities  *armmsi.UserAssignedIdentitiesClient
	assignments *armauthorization.RoleAssignmentsClient
	// endpoint is Resource Manager's URL (the dry run's raw reads).
	endpoint string
	// pipeline is the clients' pipeline, which resumes their pollers
	// (resume).
	pipeline runtime.Pipeline
	// resources reads resources by id (the staging storage account);
	// cred and opts make the Blob service's clients (staging.go).
	resources *armresources.Client
	cred      azcore.TokenCredential
	opts      azcore.ClientOptions
}

// Cloud is the cloud configuration of an account's credentials: public
// Azure's, with Resource Manager at endpoint and Entra ID at authorityHost
// when the account names them.
func Cloud(cr map[string]string) cloud.Configuration {
	c := cloud.AzurePublic
	if a := cr[v1.AzureAuthorityHost]; a != "" {
		c.ActiveDirectoryAuthorityHost = strings.TrimSuffix(a, "/") + "/"
	}
	if e := cr[v1.AzureEndpoint]; e != "" {
		e = strings.TrimSuffix(e, "/")
		c.Services = map[cloud.ServiceName]cloud.ServiceConfiguration{
			cloud.ResourceManager: {Endpoint: e, Audience: e},
		}
	}
	return c
}

// clientsFor returns clients for the account (nil: none, an error naming
// what to set). Its credentials are checked as a PUT of the account checks
// them (validate.AzureCredentials): an account written before a rule, or
// by hand, is refused naming the field.
func (n *Azure) clientsFor(a *provider.Account) (*clients, error) {
	if a == nil {
		return nil, failure.Terminal(v1.CodeInvalidCredentials, "the azure provider needs a cloud account: set spec.cloudAccount to an account of provider azure")
	}
	cr := a.Credentials
	if findings := validate.AzureCredentials(cr); len(findings) > 0 {
		f := findings[0]
		code := v1.CodeInvalidParameter
		if f.Code == v1.CodeMissingParameter {
			code = v1.CodeInvalidCredentials
		}
		e := failure.Terminal(code, "cloud account %q: %s (%s); update the account", a.Name, f.Message, f.Target)
		e.Target = "spec.cloudAccount"
		return nil, e
	}
	hc := n.opts.HTTPClient
	if b := cr[v1.AzureCABundle]; b != "" {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(b))
		hc = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	opts := azcore.ClientOptions{
		Cloud:            Cloud(cr),
		Retry:            policy.RetryOptions{MaxRetries: n.opts.MaxRetries},
		PerCallPolicies:  []policy.Policy{countRetries{}},
		PerRetryPolicies: []policy.Policy{countAttempt{}},
	}
	if hc != nil {
		opts.Transport = hc
	}
	cred, err := azidentity.NewClientSecretCredential(cr[v1.AzureTenant], cr[v1.AzureClientID], cr[v1.AzureClientSecret],
		&azidentity.ClientSecretCredentialOptions{
			ClientOptions: opts,
			// MSAL asks login.microsoftonline.com about an authority it
			// does not know: never for another cloud's.
			DisableInstanceDiscovery: cr[v1.AzureAuthorityHost] != "",
		})
	if err != nil {
		e := failure.Terminal(v1.CodeInvalidCredentials, "cloud account %q: its credentials cannot sign in: %v", a.Name, err)
		e.Target, e.Err = "spec.cloudAccount", err
		return nil, e
	}
	armOpts := &arm.ClientOptions{ClientOptions: opts}
	sub := cr[v1.AzureSubscription]
	groups, err := armresources.NewResourceGroupsClient(sub, cred, armOpts)
	if err != nil {
		return nil, err
	}
	f, err := armnetwork.NewClientFactory(sub, cred, armOpts)
	if err != nil {
		return nil, err
	}
	cf, err := armcompute.NewClientFactory(sub, cred, armOpts)
	if err != nil {
		return nil, err
	}
	mf, err := armmsi.NewClientFactory(sub, cred, armOpts)
	if err != nil {
		return nil, err
	}
	af, err := armauthorization.NewClientFactory(sub, cred, armOpts)
	if err != nil {
		return nil, err
	}
	rc, err := armresources.NewClient(sub, cred, armOpts)
	if err != nil {
		return nil, err
	}
	resumer, err := arm.NewClient("kiln.dev/kiln/internal/provider/azure", "v1.0.0", cred, armOpts)
	if err != nil {
		return nil, err
	}
	endpoint := opts.Cloud.Services[cloud.ResourceManager].Endpoint
	if endpoint == "" {
		endpoint = cloud.AzurePublic.Services[cloud.ResourceManager].Endpoint
	}
	return &clients{account: a.Name, groups: groups, net: f, compute: cf, identities: mf.NewUserAssignedIdentitiesClient(),
		assignments: af.NewRoleAssignmentsClient(), endpoint: endpoint, pipeline: resumer.Pipeline(), resources: rc, cred: cred, opts: opts}, nil
}

// cluster is what every method works with: the cluster, its identity,
// its group, region and clients.
type cluster struct {
	provider.Cluster
	id     string // clusterID
	group  string // GroupName
	region string
	api    *clients
}

func (n *Azure) cluster(c provider.Cluster) (*cluster, error) {
	if c.Project == "" || c.Name == "" {
		return nil, failure.Terminal(v1.CodeInvalidParameter, "the azure provider needs a cluster's project and name")
	}
	api, err := n.clientsFor(c.Account)
	if err != nil {
		return nil, err
	}
	region := c.Spec.Region
	if region == "" {
		region = c.Account.Credentials[v1.AzureRegion]
	}
	if region == "" {
		region = DefaultRegion
	}
	return &cluster{Cluster: c, id: clusterID(c), group: GroupName(c.Project, c.Name), region: region, api: api}, nil
}

// clusterID is the cluster's identity in tags: its UID, or project/name for
// a record without one.
func clusterID(c provider.Cluster) string {
	if c.UID != "" {
		return c.UID
	}
	return c.Project + "/" + c.Name
}

// maxGroupName is Azure's limit on a resource group's name.
const maxGroupName = 90

// GroupName is the resource group of a cluster: "kiln-PROJECT_CLUSTER".
// Project and cluster names are DNS labels, which have no "_", so no two
// clusters share a name (kiln-a-b_c is project a-b's cluster c, never
// project a's b-c). A name longer than Azure allows (90) keeps its first
// 81 characters and 8 hex digits of a hash of project/cluster.
func GroupName(project, cluster string) string {
	name := "kiln-" + project + "_" + cluster
	if len(name) <= maxGroupName {
		return name
	}
	sum := sha256.Sum256([]byte(project + "/" + cluster))
	return name[:maxGroupName-9] + "-" + hex.EncodeToString(sum[:4])
}

// tags are the tags of a part of the cluster.
func (c *cluster) tags(part string) map[string]*string {
	return map[string]*string{
		TagCluster: to(c.id),
		TagProject: to(c.Project),
		TagName:    to(c.Name),
		TagPart:    to(part),
	}
}

// tagged reports whether have holds every tag of want with its value.
func tagged(have, want map[string]*string) bool {
	for k, v := range want {
		if h, ok := have[k]; !ok || h == nil || *h != *v {
			return false
		}
	}
	return true
}

// mergeTags is have with want's tags set (a tag someone added is kept).
func mergeTags(have, want map[string]*string) map[string]*string {
	out := make(map[string]*string, len(have)+len(want))
	for k, v := range have {
		out[k] = v
	}
	for k, v := range want {
		out[k] = v
	}
	return out
}

func to[T any](v T) *T { return &v }

// deref is *p, or T's zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// sameID compares Azure resource ids, which ARM compares without case.
func sameID(a, b string) bool { return strings.EqualFold(a, b) }
