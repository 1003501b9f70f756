package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/precheck"
)

type precheckFlags struct {
	controller, root, proc, hostname, caFile, output string
	timeout                                          time.Duration
	skip                                             []string
	privateRoot                                      bool
}

func newPrecheckCommand(stdout, stderr io.Writer) *cobra.Command {
	var f precheckFlags
	cmd := &cobra.Command{
		Use:   "precheck",
		Short: "Check that this host can run Kubernetes",
		Long: "Runs the host prechecks (" + strings.Join(precheck.Names(), ", ") + ") and prints each result.\n" +
			"Exits 1 when any check failed. See docs/agent.md for what each check looks at.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.output != "table" && f.output != "json" {
				return usageError{fmt.Errorf("-o %q: want table or json", f.output)}
			}
			for _, s := range f.skip {
				if !slices.Contains(precheck.Names(), s) {
					return usageError{fmt.Errorf("--skip %q: no such check (have %s)", s, strings.Join(precheck.Names(), ", "))}
				}
			}
			cfg, err := f.config()
			if err != nil {
				return err
			}
			results := precheck.Run(cmd.Context(), cfg)
			if err := render(stdout, f.output, results); err != nil {
				return err
			}
			if precheck.Failed(results) {
				var failed []string
				for _, r := range results {
					if r.Result == precheck.Fail {
						failed = append(failed, r.Name)
					}
				}
				fmt.Fprintf(stderr, "%d of %d checks failed: %s\n", len(failed), len(results), strings.Join(failed, ", "))
				return errChecksFailed
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.controller, "controller", "", "the controller's URL, for the reachability and clock checks")
	fl.StringVar(&f.caFile, "ca", "", "a PEM file with the CA that signs the controller's certificate (default: the system's)")
	fl.StringVar(&f.root, "root", "/", "the host's root directory (files such as /etc/os-release are read under it)")
	fl.StringVar(&f.proc, "proc", "", "the proc filesystem (default ROOT/proc, or /proc with --private-root)")
	fl.StringVar(&f.hostname, "hostname", "", "the name to check instead of the host's")
	fl.BoolVar(&f.privateRoot, "private-root", false, privateRootUsage)
	fl.DurationVar(&f.timeout, "timeout", precheck.DefaultTimeout, "how long each check may take")
	fl.StringSliceVar(&f.skip, "skip", nil, "checks not to run")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	return cmd
}

func (f precheckFlags) config() (precheck.Config, error) {
	cfg := precheck.Config{
		Host:       precheck.Host{Root: f.root, Proc: f.proc, Hostname: f.hostname, PrivateRoot: f.privateRoot},
		Controller: f.controller,
		Timeout:    f.timeout,
		Skip:       f.skip,
	}
	if f.caFile != "" {
		pemData, err := os.ReadFile(f.caFile)
		if err != nil {
			return cfg, fmt.Errorf("--ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemData) {
			return cfg, usageError{fmt.Errorf("--ca %s: no PEM certificate in it", f.caFile)}
		}
		cfg.HTTPClient = &http.Client{Transport: &http.Transport{
			Proxy:           http.ProxyFromEnvironment,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}}
	}
	return cfg, nil
}

// render prints results as a table (failures in capitals) or as JSON.
func render(w io.Writer, output string, results []v1.PrecheckResult) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tMESSAGE")
	for _, r := range results {
		result := r.Result
		if result == precheck.Fail {
			result = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, result, r.Message)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}
