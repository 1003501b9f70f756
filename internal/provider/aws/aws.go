// Package aws is the provider whose machines are EC2 instances, made with
// the official SDK (aws-sdk-go-v2) in the architecture a leading cluster
// service documents for AWS: per zone a public and a private subnet, a NAT
// gateway in each public subnet, one internet gateway, a bastion in a public
// subnet as the only SSH entry, every node in the private subnets spread
// over the zones, and the API server behind a network load balancer across
// the control-plane instances.
//
// Everything it makes is tagged kubernetes.io/cluster/NAME=owned and with
// Kiln's cluster id (TagCluster), and found again by those tags (or by
// names derived from the id where AWS names things: load balancers, target
// groups, IAM roles, key pairs): a step run twice, or by a restarted kilnd,
// finds what exists instead of making it again. Deleting removes everything
// in dependency order and fails, naming them, when tagged resources remain.
//
// A cloud account of provider aws holds the credentials (Credential*
// keys): an access key pair, optionally a role to assume, the default
// region and an optional endpoint (the local AWS of test/cloud/aws, for
// tests and the demo). docs/provider-aws.md says what is made and why.
package aws

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/middleware"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// Name is the provider's name in spec.provider.
const Name = "aws"

// Credentials of a cloud account of provider aws.
const (
	CredentialKeyID    = "accessKeyId"
	CredentialSecret   = "secretAccessKey"
	CredentialSession  = "sessionToken" // optional
	CredentialRoleARN  = "roleArn"      // optional: a role to assume with the key
	CredentialRegion   = "region"       // the account's default region
	CredentialEndpoint = "endpoint"     // optional: another endpoint for every service (the local AWS)
	// CredentialStagingBucket optionally names an S3 bucket of the
	// account's region where clusters' join files are staged (staging.go).
	CredentialStagingBucket = "stagingBucket"
)

var credentialKeys = []string{CredentialKeyID, CredentialSecret, CredentialSession, CredentialRoleARN, CredentialRegion, CredentialEndpoint, CredentialStagingBucket}

// DefaultRegion is the region of a cluster whose spec and account name none.
const DefaultRegion = "us-east-1"

// Tags on everything the provider makes.
const (
	TagCluster  = "kiln.dev/cluster-id" // the cluster's id (clusterID): how it is found
	TagProject  = "kiln.dev/project"
	TagName     = "kiln.dev/cluster"
	TagPart     = "kiln.dev/part" // which part of the cluster's infrastructure: vpc, public-subnet, nat, ...
	TagZone     = "kiln.dev/zone"
	TagMachine  = "kiln.dev/machine"
	TagRole     = "kiln.dev/role"
	TagPool     = "kiln.dev/pool"
	TagRevision = "kiln.dev/revision"
)

// APIServerPort is the port of the load balancer's listener and of every
// control-plane instance's API server.
const APIServerPort = 6443

// Machine is what Options.UserData is told about the instance it boots.
// Name is empty for a pool's instances, which share their launch
// template's user data: each is the node named by its hostname (its
// instance id). JoinFrom, when set, is the staging location of the join
// files (s3://BUCKET/KEY, in Region), which the instance fetches with its
// role instead of user data carrying them.
type Machine struct {
	Project, Cluster, Name, Role, Pool, Version string
	JoinFrom, Region                            string
	// Bootstrap is what its agent joins with (MachineSpec.Bootstrap).
	Bootstrap *provider.Bootstrap
}

// Options configure the provider.
type Options struct {
	// UserData is the boot script of a machine (a shell script, #!/bin/sh
	// first): it starts kiln-agent with the machine's bootstrap data, so
	// the node joins as on every provider. Default AgentUserData.
	UserData func(ctx context.Context, m Machine) (string, error)
	// Versions are the Kubernetes versions machines install, oldest first;
	// an instance of version V boots the image named ImagePrefix+V.
	Versions    []string
	ImagePrefix string // default "kiln-node-"
	// Distribution is what the machines install; default v1.DistroKiln
	// (the node image's kiln-kube).
	Distribution string
	// MaxAttempts is how many times the SDK tries a call that AWS throttled
	// or failed with a 5xx before the step sees the error; default 5.
	MaxAttempts int
	// HTTPClient is the SDK's HTTP client; default the SDK's.
	HTTPClient *http.Client
	// Logger gets operator logs; default discarded.
	Logger *slog.Logger
}

// AWS is the aws provider.
type AWS struct {
	opts  Options
	log   *slog.Logger
	pools sync.Map // cluster id/pool to *sync.Mutex (poolLock)
}

var (
	_ provider.Provider      = (*AWS)(nil)
	_ provider.LoadBalancers = (*AWS)(nil)
	_ provider.Describer     = (*AWS)(nil)
	_ provider.Installing    = (*AWS)(nil)
	_ provider.Stopper       = (*AWS)(nil)
)

// New returns the aws provider.
func New(opts Options) (*AWS, error) {
	if opts.UserData == nil {
		opts.UserData = AgentUserData
	}
	if opts.ImagePrefix == "" {
		opts.ImagePrefix = "kiln-node-"
	}
	if opts.Distribution == "" {
		opts.Distribution = v1.DistroKiln
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = 5
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &AWS{opts: opts, log: opts.Logger}, nil
}

// Distributions says what the instances install: the node image's
// distribution, at the versions there are images of.
func (p *AWS) Distributions() map[string][]string {
	return map[string][]string{p.opts.Distribution: slices.Clone(p.opts.Versions)}
}

// clients are the SDK's clients for one account and region.
type clients struct {
	region string
	ec2    *ec2.Client
	asg    *autoscaling.Client
	elb    *elb.Client
	iam    *iam.Client
	sts    *sts.Client
	quotas *servicequotas.Client
	s3     *s3.Client
}

// clientsFor returns clients for the account (nil: none, an error naming
// what to set) in region ("" for the account's, then DefaultRegion).
func (p *AWS) clientsFor(a *provider.Account, region string) (*clients, error) {
	if a == nil {
		return nil, failure.Terminal(v1.CodeInvalidCredentials, "the aws provider needs a cloud account: set spec.cloudAccount to an account of provider aws")
	}
	cr := a.Credentials
	for k := range cr {
		if !slices.Contains(credentialKeys, k) {
			e := failure.Terminal(v1.CodeInvalidParameter, "cloud account %q has a credential %q the aws provider does not know; it takes %s", a.Name, k, strings.Join(credentialKeys, ", "))
			e.Target = "spec.cloudAccount"
			return nil, e
		}
	}
	if e := cr[CredentialEndpoint]; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			f := failure.Terminal(v1.CodeInvalidParameter, "cloud account %q has endpoint %q: want an http or https URL such as https://aws.example.com", a.Name, e)
			f.Target = "spec.cloudAccount"
			return nil, f
		}
	}
	cfg, err := Config(a.Name, cr, region, func(cfg *awssdk.Config) {
		cfg.RetryMaxAttempts = p.opts.MaxAttempts
		cfg.RetryMode = awssdk.RetryModeStandard
		cfg.APIOptions = []func(*middleware.Stack) error{countRetries}
		if p.opts.HTTPClient != nil {
			cfg.HTTPClient = p.opts.HTTPClient
		}
	})
	if err != nil {
		return nil, err
	}
	return &clients{
		region: cfg.Region,
		ec2:    ec2.NewFromConfig(cfg),
		asg:    autoscaling.NewFromConfig(cfg),
		elb:    elb.NewFromConfig(cfg),
		iam:    iam.NewFromConfig(cfg),
		sts:    sts.NewFromConfig(cfg),
		quotas: servicequotas.NewFromConfig(cfg),
		s3: s3.NewFromConfig(cfg, func(o *s3.Options) {
			o.UsePathStyle = cr[CredentialEndpoint] != "" // a custom endpoint has no DNS names for buckets
		}),
	}, nil
}

// Config is the SDK configuration of the credentials of cloud account
// (Credential* keys) in region ("" for the account's, then DefaultRegion):
// its access key, the role it assumes with it, its endpoint. Each of with
// adjusts it (retries, HTTP client) before the role's STS client is made
// from it. An account without an access key is a terminal
// InvalidCredentials naming the keys to set.
func Config(account string, cr map[string]string, region string, with ...func(*awssdk.Config)) (awssdk.Config, error) {
	if cr[CredentialKeyID] == "" || cr[CredentialSecret] == "" {
		return awssdk.Config{}, failure.Terminal(v1.CodeInvalidCredentials, "cloud account %q has no AWS access key: set its credentials %s and %s", account, CredentialKeyID, CredentialSecret)
	}
	if region == "" {
		region = cr[CredentialRegion]
	}
	if region == "" {
		region = DefaultRegion
	}
	cfg := awssdk.Config{
		Region:      region,
		Credentials: awssdk.NewCredentialsCache(credentials.NewStaticCredentialsProvider(cr[CredentialKeyID], cr[CredentialSecret], cr[CredentialSession])),
	}
	for _, f := range with {
		f(&cfg)
	}
	if e := cr[CredentialEndpoint]; e != "" {
		cfg.BaseEndpoint = awssdk.String(e)
	}
	if role := cr[CredentialRoleARN]; role != "" {
		cfg.Credentials = awssdk.NewCredentialsCache(stscreds.NewAssumeRoleProvider(sts.NewFromConfig(cfg), role,
			func(o *stscreds.AssumeRoleOptions) { o.RoleSessionName = "kiln" }))
	}
	return cfg, nil
}

// cluster is what every method works with: the cluster, its id and its
// clients.
type cluster struct {
	provider.Cluster
	id  string // clusterID
	api *clients
}

func (p *AWS) cluster(c provider.Cluster) (*cluster, error) {
	if c.Project == "" || c.Name == "" {
		return nil, failure.Terminal(v1.CodeInvalidParameter, "the aws provider needs a cluster's project and name")
	}
	api, err := p.clientsFor(c.Account, c.Spec.Region)
	if err != nil {
		return nil, err
	}
	return &cluster{Cluster: c, id: clusterID(c), api: api}, nil
}

// clusterID is the cluster's identity in tags: its UID, or project/name for
// a record without one.
func clusterID(c provider.Cluster) string {
	if c.UID != "" {
		return c.UID
	}
	return c.Project + "/" + c.Name
}

// short is a name AWS accepts where names are short (load balancers: 32
// characters): "kiln-" and 10 hex digits of the cluster's id, then suffix.
func (c *cluster) short(suffix string) string {
	sum := sha256.Sum256([]byte(c.id))
	name := "kiln-" + hex.EncodeToString(sum[:5])
	if suffix != "" {
		name += "-" + suffix
	}
	return name
}

// tags are the tags of a resource of the cluster: what finds it, the
// part it plays, and a Name for the console.
func (c *cluster) tags(part string, extra ...string) map[string]string {
	t := map[string]string{
		"kubernetes.io/cluster/" + c.Name: "owned",
		TagCluster:                        c.id,
		TagProject:                        c.Project,
		TagName:                           c.Name,
		TagPart:                           part,
		"Name":                            c.Name + "-" + part,
	}
	for i := 0; i+1 < len(extra); i += 2 {
		t[extra[i]] = extra[i+1]
	}
	return t
}

// How long visible waits for what was just made to be described.
var (
	visibleTimeout = time.Minute
	visibleEvery   = 250 * time.Millisecond
)

// visible waits until AWS describes what was just made, found as a step
// run again would look for it (check). AWS is eventually consistent: a
// step retried before then would not find it and would make another. What
// has a client token (instances, NAT gateways) or a unique name (load
// balancers, IAM roles) needs no wait.
func visible(ctx context.Context, what string, check func() (bool, error)) error {
	deadline := time.Now().Add(visibleTimeout)
	for {
		ok, err := check()
		switch {
		case ok:
			return nil
		case err != nil && !notFound(err):
			return classify(err, "", "find %s", what)
		case time.Now().After(deadline):
			return failure.Retryable(v1.CodeTimeout, err, "AWS did not describe %s within %s of making it", what, visibleTimeout)
		}
		if err := wait(ctx, visibleEvery); err != nil {
			return err
		}
	}
}

// wait sleeps d or until ctx ends.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// joinIDs says a list of ids in a message.
func joinIDs(ids []string) string { return strings.Join(ids, ", ") }
