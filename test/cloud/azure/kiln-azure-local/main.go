// Command kiln-azure-local serves the local Azure (package
// test/cloud/azure): a stateful test double of Microsoft Entra ID's client
// credentials flow and of Azure Resource Manager (resource groups and
// Microsoft.Network), which the Azure SDK for Go reaches through a custom
// cloud configuration. It never calls Azure.
//
//	kiln-azure-local --listen 127.0.0.1:8443 --state /tmp/azure.json \
//	    --ca-out /tmp/azure-ca.pem --client APP-ID:SECRET
//
// Virtual machines run as containers of Kiln's node image on the Docker
// engine unless --no-machines is given.
//
// It serves TLS only (the SDK sends tokens over https only, and MSAL wants
// an https authority): with --tls-cert and --tls-key, or a self-signed
// certificate whose PEM --ca-out writes for clients to trust. It serves
// until SIGTERM or SIGINT, then shuts down gracefully.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
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
	"kiln.dev/kiln/test/cloud/azure"
	"kiln.dev/kiln/test/cloud/localcloud"
	"kiln.dev/kiln/test/cloud/machines"
)

const usage = `kiln-azure-local: a local Azure for tests (Entra ID's client credentials, Resource Manager: resource groups, networks, compute, managed identities, role assignments, storage accounts; the Blob service; the instance metadata service).

Usage:
  kiln-azure-local --listen 127.0.0.1:PORT [--ca-out FILE | --tls-cert FILE --tls-key FILE] [flags]

Every ARM call is checked against its caller's role assignments, as
Azure's role-based access control checks it (403 AuthorizationFailed
naming the action and the scope). Each client is Owner of every
subscription unless --role says otherwise, e.g. --role kiln-local=Reader,
--role app2=Contributor --role 'app2=User Access Administrator@/subscriptions/SUB/resourceGroups/rg1',
or --role app3=none. --custom-role FILE defines a role of your own (az's
role definition JSON: Name, Actions, NotActions, AssignableScopes), e.g.
{"Name": "Kiln without scale sets", "Actions": ["*"], "NotActions":
["Microsoft.Compute/virtualMachineScaleSets/write"]}, for --role to name.

Point the Azure SDK for Go at it with a cloud.Configuration whose
ActiveDirectoryAuthorityHost and ResourceManager Endpoint and Audience are
https://127.0.0.1:PORT, trusting the certificate, with
DisableInstanceDiscovery set on the credential (docs/azure-local.md).

Flags:
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kiln-azure-local:", err)
		os.Exit(1)
	}
}

func run() error {
	var clients, subs, regions, roles, customRoles localcloud.StringList
	fs := flag.NewFlagSet("kiln-azure-local", flag.ContinueOnError)
	listen := fs.String("listen", "", "address to serve on, HOST:PORT (required)")
	state := fs.String("state", "", "state file, kept across restarts (default: in memory only)")
	certFile := fs.String("tls-cert", "", "the TLS certificate to serve (PEM); with --tls-key")
	keyFile := fs.String("tls-key", "", "the TLS certificate's key (PEM)")
	caOut := fs.String("ca-out", "", "without --tls-cert: write the self-signed certificate made at start here (PEM), for clients to trust")
	tenant := fs.String("tenant", azure.DefaultTenant, "the directory's tenant id")
	fs.Var(&subs, "subscription", "a subscription id (repeatable; default "+azure.DefaultSubscription+")")
	fs.Var(&clients, "client", "an application that may get tokens, ID:SECRET (repeatable; default kiln-local:kiln-local-secret)")
	fs.Var(&roles, "role", "CLIENT=ROLE[@SCOPE]: a built-in role (Owner, Contributor, Reader, User Access Administrator, Network Contributor, ...) the client has at SCOPE (default: each subscription); repeatable. A client with no --role is Owner of every subscription; CLIENT=none gives it no role")
	fs.Var(&customRoles, "custom-role", "FILE: a custom role definition, JSON as az role definition create --role-definition reads it ({\"Name\", \"Actions\", \"NotActions\", \"AssignableScopes\"}), which --role may name (repeatable)")
	fs.Var(&regions, "region", "a region (repeatable; default eastus, westus2, westeurope)")
	polls := fs.Int("in-progress-polls", 1, "polls of an operation's status answered InProgress before it ends (0: none)")
	opTime := fs.Duration("operation-time", 10*time.Second, "end an operation this long after it began even if nobody polls it (0: only polls end operations)")
	image := fs.String("node-image", nodeimage.Repository, "the Docker repository of the node images (tag VERSION is the image kiln:kiln-node:VERSION:latest)")
	noMachines := fs.Bool("no-machines", false, "keep virtual machines as records only: no container runs (no Docker needed)")
	instancePort := fs.Int("instance-port", -1, "the port of each virtual network's instance endpoint (the instance metadata service, identity tokens, and the Blob service, for the virtual machines) at its Docker network's gateway address; default the --listen port, 0 for none")
	hostAddresses := fs.Bool("host-addresses", false, "make load balancers forward: their frontends' addresses go on this host's lo (ip(8), needs root), taken off at exit")
	var images localcloud.StringList
	fs.Var(&images, "image", "with --no-machines, a node image version virtual machines may name (repeatable)")
	if done, err := localcloud.Parse(fs, usage, os.Args[1:], listen); done || err != nil {
		return err
	}
	if (*certFile == "") != (*keyFile == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if *certFile == "" && *caOut == "" {
		return errors.New("give --tls-cert and --tls-key, or --ca-out for a self-signed certificate: clients must trust it")
	}
	cs, err := parseClients(clients, roles)
	if err != nil {
		return err
	}
	if *polls == 0 {
		*polls = -1 // Options: negative is none
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cert, err := certificate(*listen, *certFile, *keyFile, *caOut)
	if err != nil {
		return err
	}
	custom, err := readCustomRoles(customRoles)
	if err != nil {
		return err
	}
	opts := azure.Options{Tenant: *tenant, Subscriptions: subs, Clients: cs, CustomRoles: custom, Regions: regions, StatePath: *state,
		InProgressPolls: *polls, OperationTime: *opTime, Images: images, Logger: log}
	if !*noMachines {
		identity := "mem" + fmt.Sprint(os.Getpid())
		if *state != "" {
			identity = machines.StateIdentity(*state)
		}
		m, err := azure.NewDockerMachines(ctx, identity, *image, log)
		if err != nil {
			return fmt.Errorf("%w (give --no-machines to run without Docker)", err)
		}
		defer m.Close()
		opts.Machines = m
		opts.InstancePort = *instancePort
		if opts.InstancePort < 0 {
			_, port, err := net.SplitHostPort(*listen)
			if err != nil {
				return fmt.Errorf("--listen %q: %w", *listen, err)
			}
			if opts.InstancePort, err = strconv.Atoi(port); err != nil || opts.InstancePort == 0 {
				return fmt.Errorf("--listen %q: give a port, or --instance-port", *listen)
			}
		}
	}
	if *hostAddresses {
		id := "mem" + fmt.Sprint(os.Getpid())
		if *state != "" {
			id = machines.StateIdentity(*state)
		}
		opts.HostAddressLabel = "lo:kaz" + id[:min(len(id), 8)]
		defer azure.RemoveHostAddresses(context.Background(), opts.HostAddressLabel)
	}
	s, err := azure.New(opts)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	hs := &http.Server{Handler: s, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	log.Info("serving the local Azure (a test double)", "endpoint", "https://"+ln.Addr().String(), "tenant", *tenant, "state", *state)
	return localcloud.Serve(ctx, log, hs, ln)
}

// parseClients reads --client ID:SECRET and their --role CLIENT=ROLE[@SCOPE].
func parseClients(flags, roleFlags []string) ([]azure.Client, error) {
	if len(flags) == 0 {
		flags = []string{"kiln-local:kiln-local-secret"}
	}
	pairs, err := localcloud.Pairs("client", "ID:SECRET", flags)
	if err != nil {
		return nil, err
	}
	roles := map[string][]azure.RoleGrant{}
	for _, f := range roleFlags {
		id, grant, ok := strings.Cut(f, "=")
		if !ok || id == "" || grant == "" {
			return nil, fmt.Errorf("--role %q: want CLIENT=ROLE[@SCOPE]", f)
		}
		if roles[id] == nil {
			roles[id] = []azure.RoleGrant{}
		}
		if strings.EqualFold(grant, "none") {
			continue
		}
		g, err := azure.ParseRoleGrant(grant)
		if err != nil {
			return nil, fmt.Errorf("--role %q: %w", f, err)
		}
		roles[id] = append(roles[id], g)
	}
	out := make([]azure.Client, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, azure.Client{ID: p[0], Secret: p[1], Roles: roles[p[0]]})
		delete(roles, p[0])
	}
	for id := range roles {
		return nil, fmt.Errorf("--role names client %s, which no --client is", id)
	}
	return out, nil
}

// readCustomRoles reads --custom-role FILE's definitions.
func readCustomRoles(files []string) ([]azure.Role, error) {
	var out []azure.Role
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--custom-role: %w", err)
		}
		var r azure.Role
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("--custom-role %s: %w", f, err)
		}
		out = append(out, r)
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
	cert, pemBytes, err := azure.SelfSigned(hosts...)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(caOut, pemBytes, 0o644); err != nil {
		return tls.Certificate{}, fmt.Errorf("--ca-out: %w", err)
	}
	return cert, nil
}
