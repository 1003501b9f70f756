// Package gcp is the provider whose clusters run in Google Cloud, made
// with the official Go client (cloud.google.com/go/compute/apiv1 over its
// REST transport, cloud.google.com/go/auth for the service-account key)
// unmodified. What exists so far is the cluster's network, in the layout
// Cluster API's GCP provider makes (network.go): a custom-mode VPC
// network, a subnetwork in the cluster's region with secondary ranges for
// pods and services, firewall rules, and a Cloud Router with Cloud NAT for
// egress; the control plane's machines as instances across the spec's
// zones (machines.go); each worker pool a regional managed instance group
// from an instance template (pools.go, provider.Pools); and the dry run
// (offer.go). It implements provider.Provider; kilnd does not register it
// yet (docs/provider-gcp.md says what is left).
//
// Everything of a cluster is named from its project and name (Prefix): a
// Compute name is unique in the Google Cloud project, so an ensure run
// again (a retried step, a kilnd restarted in the middle) finds what the
// first made by name. Networks, firewalls and routers take no labels in
// Compute Engine, so each part says whose it is in its description
// (owner): a part of that name that is another's is never taken over nor
// deleted. Every mutation answers an operation, waited on with the SDK's
// op.Wait; its name is kept in the step's checkpoint until it ends, so
// that the step run again waits on that very operation rather than
// writing again (ops.go).
//
// A cloud account of provider gcp holds the credentials (v1.GCP* names): a
// service account's key file, the project (the key's when absent), and
// optionally another endpoint with a CA bundle (the local Compute Engine
// of test/cloud/gcp), reached with option.WithEndpoint.
package gcp

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/auth/httptransport"
	compute "cloud.google.com/go/compute/apiv1"
	"google.golang.org/api/cloudresourcemanager/v1"
	"google.golang.org/api/option"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/validate"
)

// Name is the provider's name in spec.provider and a cloud account's
// provider.
const Name = v1.ProviderGCP

// DefaultRegion is the region of a cluster whose spec and account name none.
const DefaultRegion = "us-central1"

// APIServerPort is the port of every control-plane machine's API server.
const APIServerPort = 6443

// Scope is the OAuth scope the provider's tokens are asked with.
const Scope = "https://www.googleapis.com/auth/cloud-platform"

// Options configure the provider.
type Options struct {
	// HTTPClient is the transport of Compute's calls and of the token
	// endpoint's; default Go's. An account's caBundle replaces its TLS
	// roots.
	HTTPClient *http.Client
	// APISourceRanges are the ranges the API server's firewall rule lets
	// in; default 0.0.0.0/0 (a spec field for them is to come, for every
	// provider).
	APISourceRanges []string
	// MaxRetries is how many times a call Google answered 429 is sent
	// again (retries.go) before the step sees it; default 5, negative
	// none.
	MaxRetries int
	// RetryBackoff is the first wait before a throttled call is sent
	// again, doubled each time; default 1s.
	RetryBackoff time.Duration
	// WaitTimeout bounds the wait for one operation within a step's
	// attempt; then the step is retried (and waits on the same operation,
	// from the checkpoint). Default 20 minutes.
	WaitTimeout time.Duration
	// Versions are the Kubernetes versions machines install, oldest
	// first: there is a node image of each (ImageName). A spec that
	// names none gets the newest.
	Versions []string
	// ImageProject is the project the node images are in; default the
	// account's.
	ImageProject string
	// BootScript is what a machine boots with (its startup-script);
	// default the node image's kiln-agent with the join files inline
	// (bootscript.Inline).
	BootScript BootScript
	// Logger gets operator logs; default discarded.
	Logger *slog.Logger
}

// GCP makes and deletes clusters' networks and machines in Google Cloud.
// It is safe for concurrent use.
type GCP struct {
	opts Options
	log  *slog.Logger
	// pools serialise the calls on one pool's group (poolLock).
	pools sync.Map
}

// New returns the gcp provider.
func New(opts Options) *GCP {
	if len(opts.APISourceRanges) == 0 {
		opts.APISourceRanges = []string{"0.0.0.0/0"}
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = 5
	}
	if opts.RetryBackoff == 0 {
		opts.RetryBackoff = time.Second
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
	return &GCP{opts: opts, log: opts.Logger}
}

// clients are the SDK's clients for one account.
type clients struct {
	account   string
	email     string // the service account's
	project   string
	networks  *compute.NetworksClient
	subnets   *compute.SubnetworksClient
	firewalls *compute.FirewallsClient
	routers   *compute.RoutersClient
	regions   *compute.RegionsClient
	types     *compute.MachineTypesClient
	// crm is Cloud Resource Manager's, for testIamPermissions (offer.go).
	crm *cloudresourcemanager.Service
	// closers are the clients made, closed by Close.
	closers   []io.Closer
	globalOps *compute.GlobalOperationsClient
	regionOps *compute.RegionOperationsClient
	zoneOps   *compute.ZoneOperationsClient
	instances *compute.InstancesClient
	templates *compute.InstanceTemplatesClient
	groups    *compute.RegionInstanceGroupManagersClient
}

func (c *clients) Close() {
	for _, cl := range c.closers {
		_ = cl.Close()
	}
}

// badAccount is a terminal error about the account's credentials.
func badAccount(code, account, format string, args ...any) *failure.Error {
	e := failure.Terminal(code, "cloud account %q: "+format, append([]any{account}, args...)...)
	e.Target = "spec.cloudAccount"
	return e
}

// clientsFor returns clients for the account, its credentials checked as
// a PUT of the account checks them (validate.GCPCredentials): an account
// written before a rule, or by hand, is refused naming the field. The
// caller closes them.
func (g *GCP) clientsFor(ctx context.Context, a *provider.Account) (*clients, error) {
	if a == nil {
		return nil, failure.Terminal(v1.CodeInvalidCredentials, "the gcp provider needs a cloud account: set spec.cloudAccount to an account of provider gcp")
	}
	cr := a.Credentials
	if findings := validate.GCPCredentials(cr); len(findings) > 0 {
		f := findings[0]
		code := v1.CodeInvalidParameter
		if f.Code == v1.CodeMissingParameter {
			code = v1.CodeInvalidCredentials
		}
		return nil, badAccount(code, a.Name, "%s (%s); update the account", f.Message, f.Target)
	}
	key, _ := validate.ParseGCPKey(cr[v1.GCPServiceAccountKey])
	project := cr[v1.GCPProject]
	if project == "" {
		project = key.ProjectID
	}
	hc := g.opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport}
	}
	if b := cr[v1.GCPCABundle]; b != "" {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(b))
		hc = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc = &http.Client{Transport: retrying{base: base, max: g.opts.MaxRetries, backoff: g.opts.RetryBackoff, ctx: ctx}}
	// The key's real flow: a JWT signed with it, exchanged at its
	// token_uri for access tokens (the 2-legged OAuth flow).
	creds, err := credentials.NewCredentialsFromJSON(credentials.ServiceAccount, []byte(cr[v1.GCPServiceAccountKey]),
		&credentials.DetectOptions{Scopes: []string{Scope}, Client: hc, Logger: g.log})
	if err != nil {
		return nil, badAccount(v1.CodeInvalidCredentials, a.Name, "the key in credentials.%s cannot sign in: %v; update the account", v1.GCPServiceAccountKey, err)
	}
	authed, err := httptransport.NewClient(&httptransport.Options{Credentials: creds, BaseRoundTripper: hc.Transport, Logger: g.log})
	if err != nil {
		return nil, err
	}
	opts := []option.ClientOption{option.WithHTTPClient(authed)}
	if e := cr[v1.GCPEndpoint]; e != "" {
		opts = append(opts, option.WithEndpoint(strings.TrimSuffix(e, "/")))
	}
	c := &clients{account: a.Name, email: key.ClientEmail, project: project}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	if c.networks, err = compute.NewNetworksRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.networks)
	if c.subnets, err = compute.NewSubnetworksRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.subnets)
	if c.firewalls, err = compute.NewFirewallsRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.firewalls)
	if c.routers, err = compute.NewRoutersRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.routers)
	if c.regions, err = compute.NewRegionsRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.regions)
	if c.types, err = compute.NewMachineTypesRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.types)
	// Cloud Resource Manager is at the account's endpoint too when it
	// names one (the local Compute Engine answers testIamPermissions).
	crmOpts := []option.ClientOption{option.WithHTTPClient(authed)}
	if e := cr[v1.GCPEndpoint]; e != "" {
		crmOpts = append(crmOpts, option.WithEndpoint(strings.TrimSuffix(e, "/")+"/"))
	}
	if c.crm, err = cloudresourcemanager.NewService(ctx, crmOpts...); err != nil {
		return nil, err
	}
	if c.globalOps, err = compute.NewGlobalOperationsRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.globalOps)
	if c.regionOps, err = compute.NewRegionOperationsRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.regionOps)
	if c.zoneOps, err = compute.NewZoneOperationsRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.zoneOps)
	if c.instances, err = compute.NewInstancesRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.instances)
	if c.templates, err = compute.NewInstanceTemplatesRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.templates)
	if c.groups, err = compute.NewRegionInstanceGroupManagersRESTClient(ctx, opts...); err != nil {
		return nil, err
	}
	c.closers = append(c.closers, c.groups)
	ok = true
	return c, nil
}

// cluster is what every method works with: the cluster, its identity,
// names, region and clients.
type cluster struct {
	provider.Cluster
	id     string // clusterID
	prefix string // Prefix
	region string
	api    *clients
}

func (g *GCP) cluster(ctx context.Context, c provider.Cluster) (*cluster, error) {
	if c.Project == "" || c.Name == "" {
		return nil, failure.Terminal(v1.CodeInvalidParameter, "the gcp provider needs a cluster's project and name")
	}
	api, err := g.clientsFor(ctx, c.Account)
	if err != nil {
		return nil, err
	}
	region := c.Spec.Region
	if region == "" {
		region = c.Account.Credentials[v1.GCPRegion]
	}
	if region == "" {
		region = DefaultRegion
	}
	return &cluster{Cluster: c, id: clusterID(c), prefix: Prefix(c.Project, c.Name), region: region, api: api}, nil
}

// clusterID is the cluster's identity in descriptions: its UID, or
// project/name for a record without one.
func clusterID(c provider.Cluster) string {
	if c.UID != "" {
		return c.UID
	}
	return c.Project + "/" + c.Name
}

// maxPrefix leaves room in Compute's 63 characters for the longest suffix
// of a part's name ("-internal").
const maxPrefix = 63 - len("-internal")

// Prefix is what a cluster's parts' names start with:
// "kiln-CLUSTER-HASH", HASH 8 hex digits of a hash of PROJECT/CLUSTER, so
// that clusters of one name in two Kiln projects sharing a Google Cloud
// project do not meet (Compute's names allow no separator that Kiln's
// names lack). A long cluster name is cut to fit.
func Prefix(project, name string) string {
	sum := sha256.Sum256([]byte(project + "/" + name))
	h := hex.EncodeToString(sum[:4])
	keep := maxPrefix - len("kiln--") - len(h)
	name = strings.TrimRight(name[:min(len(name), keep)], "-")
	return "kiln-" + name + "-" + h
}

// NodeTag is the network tag every machine of the cluster carries (what
// its firewall rules target); ControlPlaneTag the control plane's.
func NodeTag(project, name string) string         { return Prefix(project, name) + "-node" }
func ControlPlaneTag(project, name string) string { return Prefix(project, name) + "-cp" }

// owner is the description of a cluster's part: whose it is, read back
// by owns.
func (c *cluster) owner(part string) string {
	return "kiln cluster " + c.Project + "/" + c.Name + " (" + c.id + "): " + part
}

// owns refuses a part of the cluster's name that is not the cluster's.
func (c *cluster) owns(description, what string) error {
	if strings.HasPrefix(description, "kiln cluster "+c.Project+"/"+c.Name+" ("+c.id+")") {
		return nil
	}
	e := failure.Terminal(v1.CodeConflict, "%s exists in project %s and is not cluster %s's (its description: %q); Kiln leaves it alone: delete or rename it",
		what, c.api.project, c.Name, description)
	return e
}
