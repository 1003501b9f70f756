package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/atomicfile"
)

func (a *app) kubeconfigCommand() *cobra.Command {
	var (
		file  string
		admin bool
		ttl   string
	)
	cmd := &cobra.Command{
		Use:   "kubeconfig CLUSTER",
		Short: "Get your kubeconfig for a cluster",
		Long: `kubeconfig prints your kubeconfig for the cluster: its endpoint, verified with
the cluster's CA, and a user that holds no credential. At each use kubectl runs
'kiln credential CLUSTER' (this kiln, at the path it has now, with the settings
of kiln login or KILN_SERVER and KILN_TOKEN) for a client certificate naming you, with the rights of your role in the
project (viewer: view, operator: edit, admin: cluster-admin), valid for the
cluster's spec.access.credentialTTL (1h by default). Once you are no longer a
member, no new credential is issued. The file holds no secret.

With --admin (admins of the project) it prints a break-glass kubeconfig
instead: a client certificate in system:masters, which RBAC does not hold
back, valid for --ttl (1h by default, 24h at most). Each is a Warning event on
the cluster and an audit entry: use it when your own credential cannot be.
With --output-file it writes the file with mode 0600 instead.`,
		Example: "  kiln kubeconfig demo --output-file ~/.kube/demo && kubectl --kubeconfig ~/.kube/demo get nodes\n" +
			"  kiln kubeconfig demo --admin --ttl 30m --output-file /tmp/demo-admin",
		Args: exactArgs("CLUSTER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if ttl != "" && !admin {
				return usageErrorf("--ttl is for --admin: your own kubeconfig's credentials last the cluster's spec.access.credentialTTL")
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			var cfg []byte
			if admin {
				cfg, err = c.AdminKubeconfig(cmd.Context(), s.Project, args[0], ttl)
				if err == nil {
					fmt.Fprintf(a.stderr, "warning: a break-glass system:masters kubeconfig for %s, recorded in its events; it cannot be revoked before it expires\n", args[0])
				}
			} else {
				// kubectl runs this very kiln for credentials, found
				// where it is now rather than on a PATH it may not be on.
				self, _ := os.Executable()
				cfg, err = c.KubeconfigFor(cmd.Context(), s.Project, args[0], self)
			}
			if err != nil {
				return err
			}
			if file == "" {
				_, err := a.stdout.Write(cfg)
				return err
			}
			if err := os.WriteFile(file, cfg, 0o600); err != nil {
				return fmt.Errorf("write kubeconfig: %w", err)
			}
			fmt.Fprintf(a.stderr, "wrote %s\n", file)
			return nil
		}),
	}
	outputFileFlag(cmd, &file, "write the kubeconfig to this file (mode 0600) instead of stdout")
	cmd.Flags().BoolVar(&admin, "admin", false, "a break-glass system:masters kubeconfig (admins; audited)")
	cmd.Flags().StringVar(&ttl, "ttl", "", "with --admin: how long it lasts, 1m to 24h (default 1h)")
	return cmd
}

// credentialSlack is how long before its expiry a cached credential is
// no longer handed out: kubectl keeps what it gets until then.
const credentialSlack = 30 * time.Second

func (a *app) credentialCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "credential CLUSTER",
		Short: "Print your credential for a cluster (kubectl's exec plugin)",
		Long: `credential prints your own credential for the cluster's Kubernetes API as
client-go's ExecCredential (JSON): a client certificate naming you, with the
rights of your role in the project, and its key. kubectl runs it for the
kubeconfigs 'kiln kubeconfig' writes; you seldom run it yourself.

It is kept in the cache directory ($XDG_CACHE_HOME/kiln, else
~/.cache/kiln; mode 0600) until 30 s before it expires, so kubectl's calls cost
no request to Kiln; a new login (another token) or another server gets its own.`,
		Example: "  kiln credential demo -p team-a",
		Args:    exactArgs("CLUSTER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			cache, cacheErr := a.credentialCachePath(s, args[0])
			if cacheErr == nil {
				if b, ok := a.cachedCredential(cache); ok {
					_, err := a.stdout.Write(b)
					return err
				}
			}
			ec, err := c.Credential(cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			b, err := json.Marshal(ec)
			if err != nil {
				return err
			}
			b = append(b, '\n')
			if cacheErr == nil {
				if err := atomicfile.WriteMkdirAll(cache, b, 0o600); err != nil {
					fmt.Fprintf(a.stderr, "warning: the credential is not cached: %v\n", err)
				}
			}
			_, err = a.stdout.Write(b)
			return err
		}),
	}
	return cmd
}

// credentialCachePath is where the credential for cluster is cached: one
// file per server, token, project and cluster, named by a hash of them (the
// token is not recoverable from it).
func (a *app) credentialCachePath(s settings, cluster string) (string, error) {
	dir := a.env["XDG_CACHE_HOME"]
	if dir == "" {
		h := a.env["HOME"]
		if h == "" {
			return "", errors.New("no cache directory: set XDG_CACHE_HOME or HOME")
		}
		dir = filepath.Join(h, ".cache")
	}
	sum := sha256.Sum256([]byte(s.Server + "\n" + s.Token + "\n" + s.Project + "\n" + cluster))
	return filepath.Join(dir, "kiln", "credentials", hex.EncodeToString(sum[:16])+".json"), nil
}

// cachedCredential returns the cached credential at path while it has
// more than credentialSlack left.
func (a *app) cachedCredential(path string) ([]byte, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(a.stderr, "warning: the cached credential is not read: %v\n", err)
		}
		return nil, false
	}
	var ec v1.ExecCredential
	if err := json.Unmarshal(b, &ec); err != nil || ec.Status == nil || ec.Status.ClientKeyData == "" {
		return nil, false
	}
	if ec.Status.ExpirationTimestamp.Sub(a.now()) <= credentialSlack {
		return nil, false
	}
	return b, true
}
