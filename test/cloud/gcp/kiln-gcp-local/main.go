// Command kiln-gcp-local serves the local Compute Engine (package
// test/cloud/gcp): a stateful test double of Google's OAuth 2.0 token
// endpoint for service-account keys and of the Compute Engine REST API
// (networks, subnetworks, firewalls, routers with Cloud NAT, instances,
// instance templates, regional managed instance groups, operations),
// which the Go client cloud.google.com/go/compute reaches through
// option.WithEndpoint. It never calls Google.
//
//	kiln-gcp-local --listen 127.0.0.1:8444 --state /tmp/gcp.json \
//	    --ca-out /tmp/gcp-ca.pem --key-out /tmp/gcp-key.json
//
// It serves TLS only (Google's clients send tokens over https): with
// --tls-cert and --tls-key, or a self-signed certificate whose PEM
// --ca-out writes for clients to trust. It serves until SIGTERM or SIGINT,
// then shuts down gracefully.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"kiln.dev/kiln/internal/nodeimage"
	"kiln.dev/kiln/test/cloud/gcp"
	"kiln.dev/kiln/test/cloud/localcloud"
	"kiln.dev/kiln/test/cloud/machines"
)

const usage = `kiln-gcp-local: a local Compute Engine for tests (the OAuth 2.0 token endpoint of service-account keys; Compute Engine's REST API: projects, regions, zones, machine types, networks, subnetworks, firewalls, routers with Cloud NAT, instances, instance templates, regional managed instance groups, operations; Cloud Resource Manager's testIamPermissions). A test double: it never calls Google.

Instances run as containers of Kiln's node image on the Docker engine
(DOCKER_HOST), their startup-script run at the first boot; --no-machines
keeps them as records only.

Usage:
  kiln-gcp-local --listen 127.0.0.1:PORT [--ca-out FILE | --tls-cert FILE --tls-key FILE] --key-out FILE [flags]

--key-out writes a key file of the first --service-account (made once and
kept in the state), whose token_uri is this server: give it to Kiln's cloud
account as its serviceAccountKey, with endpoint https://127.0.0.1:PORT.
Every call is checked against the caller's roles in its project (403 naming
the permission); an account with no --role is roles/owner, e.g.
--role kiln@kiln-local.iam.gserviceaccount.com=roles/compute.networkAdmin.

Flags:
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kiln-gcp-local:", err)
		os.Exit(1)
	}
}

func run() error {
	var projects, accounts, roles, disabled localcloud.StringList
	fs := flag.NewFlagSet("kiln-gcp-local", flag.ContinueOnError)
	listen := fs.String("listen", "", "address to serve on, HOST:PORT (required)")
	state := fs.String("state", "", "state file, kept across restarts (default: in memory only)")
	certFile := fs.String("tls-cert", "", "the TLS certificate to serve (PEM); with --tls-key")
	keyFile := fs.String("tls-key", "", "the TLS certificate's key (PEM)")
	caOut := fs.String("ca-out", "", "without --tls-cert: write the self-signed certificate made at start here (PEM), for clients to trust")
	keyOut := fs.String("key-out", "", "write a key file of the first --service-account here (JSON, as gcloud iam service-accounts keys create writes it)")
	fs.Var(&projects, "project", "a project id (repeatable; default "+gcp.DefaultProject+")")
	fs.Var(&accounts, "service-account", "a service account that may get tokens, NAME@PROJECT.iam.gserviceaccount.com (repeatable; default kiln@PROJECT of the first project)")
	fs.Var(&roles, "role", "EMAIL=ROLE: a predefined role the service account has in its project (roles/owner, roles/editor, roles/viewer, roles/compute.admin, roles/compute.networkAdmin, roles/compute.securityAdmin, roles/compute.instanceAdmin.v1, roles/compute.viewer); repeatable; EMAIL=none gives it none")
	fs.Var(&disabled, "compute-disabled", "a project whose Compute Engine API is not enabled: its calls answer 403 accessNotConfigured (repeatable)")
	polls := fs.Int("running-polls", 0, "reads of an operation answered RUNNING before it is DONE")
	image := fs.String("node-image", nodeimage.Repository, "the Docker repository of the node images (tag VERSION is the image projects/P/global/images/kiln-node-VERSION, dots made dashes)")
	noMachines := fs.Bool("no-machines", false, "keep instances as records only: no container runs (no Docker needed)")
	var images, quotas localcloud.StringList
	fs.Var(&quotas, "quota", "METRIC=LIMIT: a regional quota's limit in every region (CPUS, IN_USE_ADDRESSES, INSTANCE_GROUP_MANAGERS, SUBNETWORKS, ROUTERS); repeatable")
	fs.Var(&images, "image", "with --no-machines, a node image version instances may boot (repeatable; none: any image)")
	if done, err := localcloud.Parse(fs, usage, os.Args[1:], listen); done || err != nil {
		return err
	}
	if (*certFile == "") != (*keyFile == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if *certFile == "" && *caOut == "" {
		return errors.New("give --tls-cert and --tls-key, or --ca-out for a self-signed certificate: clients must trust it")
	}
	if len(projects) == 0 {
		projects = localcloud.StringList{gcp.DefaultProject}
	}
	if len(accounts) == 0 {
		accounts = localcloud.StringList{"kiln@" + projects[0] + ".iam.gserviceaccount.com"}
	}
	sas, err := serviceAccounts(accounts, roles)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cert, err := certificate(*listen, *certFile, *keyFile, *caOut)
	if err != nil {
		return err
	}
	limits, err := parseQuotas(quotas)
	if err != nil {
		return err
	}
	opts := gcp.Options{Projects: projects, ComputeDisabled: disabled, ServiceAccounts: sas, StatePath: *state, RunningPolls: *polls,
		Images: images, Quotas: limits, Logger: log}
	if !*noMachines {
		identity := "mem" + fmt.Sprint(os.Getpid())
		if *state != "" {
			identity = machines.StateIdentity(*state)
		}
		m, err := gcp.NewDockerMachines(ctx, identity, *image, log)
		if err != nil {
			return fmt.Errorf("%w (give --no-machines to run without Docker)", err)
		}
		defer m.Close()
		opts.Machines = m
	}
	s, err := gcp.New(opts)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	base := "https://" + ln.Addr().String()
	if *keyOut != "" {
		key, ok, err := s.KeyOf(sas[0].Email, base)
		if err == nil && !ok {
			key, err = s.NewKey(sas[0].Email, base)
		}
		if err == nil {
			err = os.WriteFile(*keyOut, key, 0o600)
		}
		if err != nil {
			return fmt.Errorf("--key-out: %w", err)
		}
	}
	hs := &http.Server{Handler: s, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	log.Info("serving the local Compute Engine (a test double)", "endpoint", base, "projects", strings.Join(projects, ","), "state", *state)
	return localcloud.Serve(ctx, log, hs, ln)
}

// parseQuotas reads --quota METRIC=LIMIT.
func parseQuotas(flags []string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, f := range flags {
		metric, v, ok := strings.Cut(f, "=")
		limit, err := strconv.ParseFloat(v, 64)
		if _, known := gcp.Quotas[metric]; !ok || err != nil || limit < 0 || !known {
			return nil, fmt.Errorf("--quota %q: want METRIC=LIMIT, METRIC one of CPUS, IN_USE_ADDRESSES, INSTANCE_GROUP_MANAGERS, SUBNETWORKS, ROUTERS", f)
		}
		out[metric] = limit
	}
	return out, nil
}

// serviceAccounts reads --service-account EMAIL and their --role EMAIL=ROLE.
func serviceAccounts(emails, roleFlags []string) ([]gcp.ServiceAccount, error) {
	roles := map[string][]string{}
	for _, f := range roleFlags {
		email, role, ok := strings.Cut(f, "=")
		if !ok || email == "" || role == "" {
			return nil, fmt.Errorf("--role %q: want EMAIL=ROLE", f)
		}
		if roles[email] == nil {
			roles[email] = []string{}
		}
		if role != "none" {
			roles[email] = append(roles[email], role)
		}
	}
	out := make([]gcp.ServiceAccount, 0, len(emails))
	for _, e := range emails {
		out = append(out, gcp.ServiceAccount{Email: e, Roles: roles[e]})
		delete(roles, e)
	}
	for e := range roles {
		return nil, fmt.Errorf("--role names %s, which no --service-account is", e)
	}
	return out, nil
}

// certificate is the one given, or a self-signed one for the listen host,
// localhost and 127.0.0.1, its PEM written to caOut.
func certificate(listen, certFile, keyFile, caOut string) (tls.Certificate, error) {
	if certFile != "" {
		return tls.LoadX509KeyPair(certFile, keyFile)
	}
	hosts := []string{"localhost", "127.0.0.1"}
	if h, _, err := net.SplitHostPort(listen); err == nil && h != "" && h != "localhost" && h != "127.0.0.1" {
		hosts = append(hosts, h)
	}
	cert, pemBytes, err := localcloud.SelfSigned("kiln-gcp-local (a test double)", hosts...)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(caOut, pemBytes, 0o644); err != nil {
		return tls.Certificate{}, fmt.Errorf("--ca-out: %w", err)
	}
	return cert, nil
}
