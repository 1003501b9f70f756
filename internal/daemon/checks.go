package daemon

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/backend/backupschedule"
	"kiln.dev/kiln/internal/backend/certcheck"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/backend/elastic"
	"kiln.dev/kiln/internal/backend/health"
	"kiln.dev/kiln/internal/backend/lbpoolcheck"
	"kiln.dev/kiln/internal/backend/policycheck"
	"kiln.dev/kiln/internal/backend/profilecheck"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/packs"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/plan/attached"
	"kiln.dev/kiln/internal/plan/clusterapi"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
)

// checks builds the backend's periodic checks (internal/backend/...), each
// with what it reads of the world beyond the store: clusters' Kubernetes
// APIs, the providers, the cluster CAs.
type checks struct {
	d         *Daemon
	providers provider.Registry
	wake      func(*store.Operation) // an operation begun: wakes the worker
}

// The periodic parts list the clusters of the providers they watch only:
// a fleet of sim clusters is not read every few seconds.

// replaceables are the providers whose machines Kiln makes and whose
// nodes run agents.
func (c checks) replaceables() []string {
	return providerNames(c.providers, func(name string) bool { return replaceable(c.providers, name) })
}

// withAgents are the providers whose nodes run agents.
func (c checks) withAgents() []string {
	return providerNames(c.providers, func(name string) bool { return usesAgents(c.providers, name) })
}

// attached are the providers of clusters made elsewhere.
func (c checks) attached() []string { return providerNames(c.providers, c.providers.Attached) }

// base is what each check is given: the providers whose clusters it
// lists, an operation kind's steps, the worker woken for what it begins,
// its interval (the check's default when 0) and its log, named part.
func (c checks) base(providers []string, interval time.Duration, part string) check.Base {
	return check.Base{Providers: providers, Steps: plan.PendingSteps, Started: c.wake, Interval: interval, Logger: c.d.log.With("part", part)}
}

// health is the machine health check: every cluster's health recorded,
// the replaceable clusters judged for repair, the attached ones observed.
func (c checks) health() check.Periodic {
	d, providers := c.d, c.providers
	return health.NewChecker(health.Options{
		Store:   d.Store,
		Watched: func(name string) bool { return replaceable(providers, name) },
		Silence: d.cfg.silence(),
		Started: d.started,
		KubeNotReady: func(ctx context.Context, cl *store.Cluster) (map[string]time.Time, error) {
			if cl.Status.Endpoint == "" {
				return nil, nil
			}
			var nodes []kubeapi.Node
			err := withKube(ctx, d.Store, cl, "kiln:health", 10*time.Second, func(ctx context.Context, kc *kubeapi.Client) (err error) {
				nodes, err = kc.ListNodes(ctx)
				return err
			})
			return health.KubeNotReady(nodes), err
		},
		Stopped: func(ctx context.Context, cl *store.Cluster) ([]string, error) {
			return stoppedMachines(ctx, providers, cl)
		},
		Attached: providers.Attached,
		Observe: func(ctx context.Context, cl *store.Cluster) error {
			ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			return attached.Observe(ctx, d.Store, cl)
		},
		Base: c.base(nil, d.cfg.HealthInterval, "health-check"),
	}).Periodic()
}

// stoppedMachines names the cluster's machines its provider reports
// stopped (plan.StopReporter); none when it cannot say.
func stoppedMachines(ctx context.Context, providers provider.Registry, cl *store.Cluster) ([]string, error) {
	sr, ok := providers[cl.Spec.Provider].(plan.StopReporter)
	if !ok {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stopped, err := sr.StoppedMachines(ctx, provider.Cluster{Project: cl.Project, Name: cl.Name, UID: cl.UID, Spec: cl.Spec})
	var out []string
	for _, s := range stopped {
		out = append(out, s.Name)
	}
	return out, err
}

// elastic is the elastic loop: jobs, idle stop and the autoscaler.
func (c checks) elastic() check.Periodic {
	d, providers := c.d, c.providers
	return elastic.NewController(elastic.Options{
		Store:   d.Store,
		Watched: func(name string) bool { return replaceable(providers, name) },
		Observe: func(ctx context.Context, cl *store.Cluster) (elastic.State, error) {
			return observe(ctx, d.Store, cl)
		},
		Submit: func(ctx context.Context, cl *store.Cluster, j v1.Job) error {
			return withKube(ctx, d.Store, cl, "kiln:jobs", 20*time.Second, func(ctx context.Context, kc *kubeapi.Client) error {
				return kc.CreateJob(ctx, elastic.KubeJob(j))
			})
		},
		Shape: func(ctx context.Context, cl *store.Cluster, instanceType string) (kubeapi.Resources, bool) {
			return instanceShape(ctx, d.Store, providers, cl, instanceType)
		},
		JobLog: func(ctx context.Context, cl *store.Cluster, job string) (log []byte, err error) {
			err = withKube(ctx, d.Store, cl, "kiln:jobs", 20*time.Second, func(ctx context.Context, kc *kubeapi.Client) (err error) {
				log, err = kc.JobLog(ctx, v1.JobNamespace, v1.LabelJob+"="+job, 64<<10)
				return err
			})
			return log, err
		},
		CanStop: func(name string) bool {
			_, ok := providers[name].(provider.Stopper)
			return ok
		},
		Cooldown: d.cfg.AutoscaleCooldown,
		Base:     c.base(c.replaceables(), d.cfg.AutoscaleInterval, "autoscaler"),
	}).Periodic()
}

// profiles is the look at applied profiles: packs' health, ProfileDrift.
func (c checks) profiles(applier *packs.Applier) check.Periodic {
	d := c.d
	return profilecheck.New(profilecheck.Options{
		Store: d.Store,
		Packs: applier,
		Target: func(ctx context.Context, cl *store.Cluster) (packs.Target, bool, error) {
			if cl.Status.Endpoint == "" {
				return packs.Target{}, false, nil
			}
			cfg, err := clusterapi.RESTConfig(ctx, d.Store, cl.Key(), cl.Status.Endpoint, "kiln:profile-check")
			if err != nil {
				return packs.Target{}, false, err
			}
			return packs.Target{Config: cfg, Project: cl.Project, Fields: packs.ClusterFields(cl.Name, &cl.Spec)}, true, nil
		},
		// the providers whose clusters apply-profile installs packs on
		// (internal/plan/profile): those with agents, and the attached
		Base: c.base(append(c.attached(), c.withAgents()...), d.cfg.ProfileCheckInterval, "profile-check"),
	}).Periodic()
}

// certificates is the certificate check: status.certificates,
// CertificatesExpiring, renewal before expiry.
func (c checks) certificates() check.Periodic {
	d, providers := c.d, c.providers
	return certcheck.New(certcheck.Options{
		Store:   d.Store,
		Watched: func(name string) bool { return usesAgents(providers, name) },
		TTL: func(cl *store.Cluster) time.Duration {
			if d.cfg.ComponentCertTTL > 0 {
				return d.cfg.ComponentCertTTL
			}
			return time.Duration(max(cl.Spec.CertificateTTLDays, 1)) * 24 * time.Hour
		},
		CA: func(ctx context.Context, k store.Key) (*x509.Certificate, error) {
			ca, err := trust.LoadCA(ctx, d.Store, k)
			if err != nil {
				return nil, err
			}
			return ca.Certificate(), nil
		},
		Warn: d.cfg.CertExpiryWarning,
		Base: c.base(c.withAgents(), d.cfg.CertCheckInterval, "cert-check"),
	}).Periodic()
}

// policies is the NetworkPolicy check: NetworkPolicyNotEnforced on the
// clusters whose pod network enforces none.
func (c checks) policies() check.Periodic {
	d := c.d
	return policycheck.New(policycheck.Options{
		Store: d.Store,
		Policies: func(ctx context.Context, cl *store.Cluster) (names []string, err error) {
			err = withKube(ctx, d.Store, cl, "kiln:policy-check", 10*time.Second, func(ctx context.Context, kc *kubeapi.Client) error {
				names, err = kc.ListNetworkPolicies(ctx)
				return err
			})
			return names, err
		},
		Base: c.base(c.withAgents(), d.cfg.PolicyCheckInterval, "policy-check"),
	}).Periodic()
}

// backups begins the backups spec.backup schedules, of the clusters whose
// etcd Kiln runs.
func (c checks) backups() check.Periodic {
	d, providers := c.d, c.providers
	return backupschedule.New(backupschedule.Options{
		Store: d.Store,
		Watched: func(cl *store.Cluster) bool {
			return usesAgents(providers, cl.Spec.Provider) && !providers.Attached(cl.Spec.Provider) && cl.Spec.Distribution != v1.DistroKubeadm
		},
		Base: c.base(c.withAgents(), d.cfg.BackupCheckInterval, "backup-schedule"),
	}).Periodic()
}

// observe reads what the elastic loop judges of a cluster's Kubernetes:
// nodes, pods, PodDisruptionBudgets and the Jobs of Kiln's jobs, within 20
// seconds.
func observe(ctx context.Context, s trust.SecretReader, cl *store.Cluster) (st elastic.State, err error) {
	if cl.Status.Endpoint == "" {
		return st, errors.New("the cluster has no endpoint yet")
	}
	err = withKube(ctx, s, cl, "kiln:autoscaler", 20*time.Second, func(ctx context.Context, kc *kubeapi.Client) (err error) {
		if st.Nodes, err = kc.ListNodes(ctx); err != nil {
			return fmt.Errorf("list nodes: %w", err)
		}
		if st.Pods, err = kc.ListPods(ctx); err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		if st.Budgets, err = kc.PodDisruptionBudgets(ctx, ""); err != nil {
			return fmt.Errorf("list PodDisruptionBudgets: %w", err)
		}
		if st.Jobs, err = kc.ListJobs(ctx, v1.LabelJob); err != nil {
			return fmt.Errorf("list Jobs: %w", err)
		}
		return nil
	})
	return st, err
}

// instanceShape is what a node of an instance type of the cluster's
// provider offers pods, as the provider describes the type (its vCPUs and
// memory; the kubelet's reserves aside), for the autoscaler to grow a pool
// that has no node yet. False when the provider does not say. The cluster's
// cloud account, when it names one, is read from accounts.
func instanceShape(ctx context.Context, accounts store.CloudAccounts, providers provider.Registry, cl *store.Cluster, instanceType string) (kubeapi.Resources, bool) {
	d, ok := providers[cl.Spec.Provider].(provider.Describer)
	if !ok {
		return kubeapi.Resources{}, false
	}
	var acct *provider.Account
	if cl.Spec.CloudAccount != "" {
		a, err := accounts.GetCloudAccount(ctx, cl.Project, cl.Spec.CloudAccount)
		if err != nil {
			return kubeapi.Resources{}, false
		}
		acct = &provider.Account{Name: a.Name, Credentials: a.Credentials}
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	o, err := d.Describe(ctx, acct, cl.Spec.Region)
	if err != nil {
		return kubeapi.Resources{}, false
	}
	t, ok := o.InstanceType(instanceType)
	if !ok || t.VCPUs <= 0 || t.MemoryMiB <= 0 {
		return kubeapi.Resources{}, false
	}
	return kubeapi.Resources{MilliCPU: int64(t.VCPUs) * 1000, Memory: int64(t.MemoryMiB) << 20, Pods: maxPodsPerNode}, true
}

// maxPodsPerNode is the kubelet's default maxPods, what a new node offers.
const maxPodsPerNode = 110

// lbPools is the load balancer pool check: LoadBalancerPoolExhausted on the
// clusters whose spec names a pool (edge hosts with MetalLB).
func (c checks) lbPools() check.Periodic {
	d := c.d
	return lbpoolcheck.New(lbpoolcheck.Options{
		Store: d.Store,
		Services: func(ctx context.Context, cl *store.Cluster) (svcs []kubeapi.LoadBalancerService, err error) {
			err = withKube(ctx, d.Store, cl, "kiln:lb-pool-check", 10*time.Second, func(ctx context.Context, kc *kubeapi.Client) error {
				svcs, err = kc.ListLoadBalancerServices(ctx)
				return err
			})
			return svcs, err
		},
		Base: c.base(c.withAgents(), d.cfg.LBPoolCheckInterval, "lb-pool-check"),
	}).Periodic()
}
