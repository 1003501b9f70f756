package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/backend/retention"
	"kiln.dev/kiln/internal/backend/servicelb"
	"kiln.dev/kiln/internal/backend/shard"
	"kiln.dev/kiln/internal/diagnose"
	"kiln.dev/kiln/internal/kubeapi"
	"kiln.dev/kiln/internal/packs"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/plan/clusterapi"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/internal/worker"
)

// backend is what a backend process runs, under one context: the
// lease-taking worker running plans, the periodic checks (the machine
// health check, the elastic loop, the profile, certificate and backup
// schedule checks) over this replica's share of the clusters, the record
// of this replica that shares them out, the pruner, and the service
// controllers of this replica's clusters (LoadBalancer Services).
type backend struct {
	worker   *worker.Worker
	replicas *shard.Replicas
	checks   []check.Periodic
	runner   check.Runner
	pruner   *retention.Pruner
	services *servicelb.Manager
	stop     context.CancelFunc // set by run
	done     chan error         // each part's Run returns here
}

// newBackend builds the backend's parts over d's store and providers.
func (d *Daemon) newBackend(providers provider.Registry, reg *prometheus.Registry) *backend {
	applier := &packs.Applier{Charts: d.charts(), Log: d.log.With("part", "packs")}
	b := &backend{}
	owner := worker.DefaultOwner()
	b.worker = worker.New(worker.Options{
		Store:        d.Store,
		Runner:       d.planRunner(providers, applier, reg),
		Owner:        owner,
		LeaseTTL:     d.cfg.LeaseTTL,
		Heartbeat:    d.cfg.Heartbeat,
		DrainTimeout: d.cfg.DrainTimeout,
		Concurrency:  d.cfg.Concurrency,
		Poll:         d.cfg.Poll,
		Logger:       d.log,
		Registerer:   reg,
	})
	c := checks{d: d, providers: providers, wake: func(*store.Operation) { b.worker.Wake() }}
	b.replicas = shard.New(shard.Options{Store: d.Store, Name: owner, TTL: d.cfg.LeaseTTL, Heartbeat: d.cfg.Heartbeat,
		Logger: d.log.With("part", "replicas")})
	b.runner = check.Runner{Store: d.Store, Shard: b.replicas}
	b.checks = []check.Periodic{c.health(), c.elastic(), c.profiles(applier), c.certificates(), c.backups(), c.policies(), c.lbPools()}
	keep := d.cfg.Retention
	b.pruner = retention.New(retention.Options{Store: d.Store, Events: keep.Events, Audit: keep.Audit, Tokens: keep.Tokens,
		Operations: keep.Operations, Instructions: keep.Instructions, CostIntervals: keep.CostIntervals, Logger: d.log.With("part", "retention")})
	b.services = servicelb.New(servicelb.Options{Store: d.Store, Writer: d.Store, Accounts: d.Store, Providers: providers, Shard: b.replicas,
		Logger: d.log.With("part", "service-lb"),
		RESTConfig: func(ctx context.Context, cl *store.Cluster) (*rest.Config, error) {
			return clusterapi.RESTConfig(ctx, d.Store, cl.Key(), cl.Status.Endpoint, "kiln:service-controller")
		}})
	return b
}

// planRunner is what the worker runs on a claimed cluster: its operation's
// plan.
func (d *Daemon) planRunner(providers provider.Registry, applier *packs.Applier, reg prometheus.Registerer) *plan.Runner {
	return plan.NewRunner(plan.Options{Store: d.Store, Providers: providers, Logger: d.log, Agents: d.agents(), Bootstrap: d.bootstrap(),
		Drain: plan.Drain{Signal: worker.Draining, Err: worker.ErrDraining},
		Packs: applier, ComponentCertificateTTL: d.cfg.ComponentCertTTL, Snapshots: d.snapshots, Registerer: reg,
		Diagnose: func(ctx context.Context, cl *store.Cluster, opID, reason string, kube plan.KubeReader) (string, error) {
			got, err := diagnose.Gather(ctx, d.Store, diagnose.Request{Cluster: cl, Operation: opID, Reason: reason, Kube: kube})
			if err != nil {
				return "", err
			}
			return got.ID, nil
		}})
}

// run starts the parts on a context of their own: ctx's values, not its
// end (drain stops them).
func (b *backend) run(ctx context.Context) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.stop = cancel
	b.done = make(chan error, 4+len(b.checks))
	go func() { b.done <- b.worker.Run(wctx) }()
	go func() { b.done <- b.replicas.Run(wctx) }()
	go func() { b.done <- b.pruner.Run(wctx) }()
	go func() { b.done <- b.services.Run(wctx) }()
	for _, p := range b.checks {
		go func() { b.done <- b.runner.Run(wctx, p) }()
	}
}

// drain stops the parts and waits for them: the worker stops claiming, and
// running plans get the drain timeout before their leases are handed back.
func (b *backend) drain() []error {
	b.stop()
	var errs []error
	for range cap(b.done) { // the worker, the replica's record, the pruner, the service controllers, each check
		if err := <-b.done; err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("worker: %w", err))
		}
	}
	return errs
}

// charts reads chart archives from this process's registry; a backend
// process has none (the frontend serves it), so chart packs fail there
// saying so.
func (d *Daemon) charts() packs.Charts {
	if d.registry != nil {
		return d.registry
	}
	return noCharts{}
}

type noCharts struct{}

func (noCharts) Chart(context.Context, string, string, string) ([]byte, error) {
	return nil, errors.New("this kilnd runs as --role backend, which has no registry to read charts from; run chart packs' clusters with a process of role all")
}

// diagnoseNow gathers a diagnostics bundle of cl (kiln cluster diagnose),
// with its Kubernetes API when it has an endpoint, for its current or last
// operation.
func (d *Daemon) diagnoseNow(ctx context.Context, cl *store.Cluster, reason string) (*store.Diagnostics, error) {
	r := diagnose.Request{Cluster: cl, Operation: cl.Status.CurrentOperation, Reason: reason}
	if cl.Status.Endpoint != "" {
		kc, err := clusterapi.KubeClient(ctx, d.Store, cl.Key(), cl.Status.Endpoint, "kiln:diagnostics")
		if err == nil {
			defer kc.Close()
			r.Kube = kc
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	return diagnose.Gather(ctx, d.Store, r)
}

// withKube calls f with a client of the cluster's Kubernetes API, as user,
// all within timeout: s reads the cluster's CA (or an attached cluster's
// kubeconfig).
func withKube(ctx context.Context, s trust.SecretReader, cl *store.Cluster, user string, timeout time.Duration,
	f func(context.Context, *kubeapi.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kc, err := clusterapi.KubeClient(ctx, s, cl.Key(), cl.Status.Endpoint, user)
	if err != nil {
		return err
	}
	defer kc.Close()
	return f(ctx, kc)
}
