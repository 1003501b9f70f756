// Command kiln-aws-local serves the local AWS (package test/cloud/aws) on
// loopback: a stateful test double of the AWS APIs Kiln uses, which the
// AWS SDK and CLI reach through a custom endpoint. It never calls AWS.
//
//	kiln-aws-local --listen 127.0.0.1:4566 --state /tmp/aws.json \
//	    --account AKIAKILN:secret --deny AKIALIMITED:ec2:RunInstances
//
// Instances run as containers of Kiln's node image on the Docker engine
// unless --no-machines is given. It serves until SIGTERM or SIGINT, then
// shuts down gracefully (instances keep running, as on AWS).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"kiln.dev/kiln/internal/nodeimage"
	"kiln.dev/kiln/test/cloud/aws"
	"kiln.dev/kiln/test/cloud/localcloud"
)

const usage = `kiln-aws-local: a local AWS for tests (EC2, ELBv2, Auto Scaling, IAM, STS, Service Quotas, S3).

Usage:
  kiln-aws-local --listen 127.0.0.1:PORT [flags]

Point the AWS SDK or CLI at it:
  AWS_ENDPOINT_URL=http://127.0.0.1:PORT AWS_ACCESS_KEY_ID=KEY AWS_SECRET_ACCESS_KEY=SECRET aws ec2 describe-instances

Flags:
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kiln-aws-local:", err)
		os.Exit(1)
	}
}

func run() error {
	var accounts, denies, regions localcloud.StringList
	fs := flag.NewFlagSet("kiln-aws-local", flag.ContinueOnError)
	listen := fs.String("listen", "", "address to serve on, 127.0.0.1:PORT (required)")
	state := fs.String("state", "", "state file, kept across restarts (default: in memory only)")
	fs.Var(&accounts, "account", "an access key the local AWS accepts, KEY:SECRET (repeatable; default AKIAKILNLOCAL:kiln-local-secret)")
	fs.Var(&denies, "deny", "an action a key may not call, KEY:service:Action, e.g. AKIALIMITED:ec2:RunInstances (repeatable)")
	fs.Var(&regions, "region", "a region the local AWS has (repeatable; default us-east-1, us-west-2, eu-west-1)")
	image := fs.String("node-image", nodeimage.Repository, "the Docker repository of the node images (tag VERSION is the AMI kiln-node-VERSION)")
	noMachines := fs.Bool("no-machines", false, "keep instances as records only: no container runs (no Docker needed)")
	routeTraffic := fs.Bool("route-traffic", false, "carry traffic to addresses outside a VPC (pods') between its instances only as its route tables allow (iptables on this host: needs root)")
	instancePort := fs.Int("instance-port", -1, "the port of each VPC's instance endpoint (IMDSv2 and every service, for the instances) at the VPC's gateway address; default the --listen port, 0 for none")
	if done, err := localcloud.Parse(fs, usage, os.Args[1:], listen); done || err != nil {
		return err
	}
	creds, err := credentials(accounts, denies)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if *instancePort < 0 {
		*instancePort = ln.Addr().(*net.TCPAddr).Port
	}
	opts := aws.Options{Credentials: creds, Regions: regions, StatePath: *state, Logger: log, InstancePort: *instancePort}
	if !*noMachines {
		identity := "mem" + fmt.Sprint(os.Getpid())
		if *state != "" {
			identity = aws.StateIdentity(*state)
		}
		m, err := aws.NewDockerMachines(ctx, aws.DockerOptions{Identity: identity, Repository: *image, Logger: log, RouteTraffic: *routeTraffic})
		if err != nil {
			return fmt.Errorf("%w (give --no-machines to run without Docker)", err)
		}
		defer m.Close()
		opts.Machines = m
	}
	s, err := aws.New(opts)
	if err != nil {
		return err
	}
	defer s.Close()
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 5 * time.Minute, IdleTimeout: 2 * time.Minute}
	log.Info("serving the local AWS", "endpoint", "http://"+ln.Addr().String(), "state", *state, "machines", !*noMachines)
	return localcloud.Serve(ctx, log, hs, ln)
}

// credentials builds the keys from --account KEY:SECRET and --deny
// KEY:service:Action.
func credentials(accounts, denies []string) ([]aws.Credential, error) {
	if len(accounts) == 0 {
		accounts = []string{"AKIAKILNLOCAL:kiln-local-secret"}
	}
	pairs, err := localcloud.Pairs("account", "KEY:SECRET", accounts)
	if err != nil {
		return nil, err
	}
	var out []aws.Credential
	index := map[string]int{}
	for _, p := range pairs {
		index[p[0]] = len(out)
		out = append(out, aws.Credential{AccessKeyID: p[0], SecretAccessKey: p[1]})
	}
	for _, d := range denies {
		key, action, ok := strings.Cut(d, ":")
		n, known := index[key]
		if !ok || !strings.Contains(action, ":") {
			return nil, fmt.Errorf("--deny %q: want KEY:service:Action", d)
		}
		if !known {
			return nil, fmt.Errorf("--deny %q: no --account has the key %s", d, key)
		}
		out[n].Deny = append(out[n].Deny, action)
	}
	return out, nil
}
