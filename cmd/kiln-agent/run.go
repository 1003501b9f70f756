package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/distro/kiln"
	"kiln.dev/kiln/internal/agent/distro/kubeadm"
	"kiln.dev/kiln/internal/agent/distro/local"
	"kiln.dev/kiln/internal/agent/mirror"
	"kiln.dev/kiln/internal/agent/spotnotice"
	"kiln.dev/kiln/internal/agent/state"
)

var errMissingJoinFlags = errors.New("--credentials and --passphrase are required to join")

// joinPatience is how long run tries to register while the controller
// cannot be reached.
const joinPatience = 10 * time.Minute

func newRunCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		f            joinFlags
		heartbeat    time.Duration
		kubeBinary   string
		distribution string
		spotNotices  string
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Hold the node's session with the controller and run its instructions",
		Long: "Connects to the controller with the node identity in --data-dir, reports facts, prechecks,\n" +
			"heartbeats and logs, and runs the instructions it receives, reconnecting until stopped.\n" +
			"Without an identity and with --credentials and --passphrase it joins first, so one command\n" +
			"line starts a node; while the controller cannot be reached it tries again for 10 minutes.\n\n" +
			"--distribution says how it carries out install and reset instructions:\n" +
			"  local    Kubernetes components from --kube-binary (kiln-kube), run as the agent's children,\n" +
			"           with their files under --root: hosts on this machine (the local and edge providers).\n" +
			"           The kubelet is hollow: pods are scheduled, no container runs.\n" +
			"  kiln     the same components with the real kubelet on this node's containerd, kube-proxy,\n" +
			"           the pod network, and every image pulled from the controller's registry: a node made\n" +
			"           from Kiln's node image (the docker provider's machines). Needs --kube-binary and root.\n" +
			"  kubeadm  containerd, kubelet, kubeadm and kubectl installed on this host with apt, then\n" +
			"           kubeadm init or join: a real Debian or Ubuntu host. The agent must run as root. The\n" +
			"           plan's files go under --root (/ on a real host); its commands always run on this\n" +
			"           host. Another --root is for tests, and then root is not required.\n" +
			"Without --distribution: local when --kube-binary is given, otherwise none (every install\n" +
			"instruction fails, saying so).",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(stderr)
			if err := f.absolute(); err != nil {
				return err
			}
			dist, err := chooseDistribution(distribution, kubeBinary, f.root)
			if err != nil {
				return err
			}
			opts := f.options(log)
			// The local distribution's kubelets are hollow: the prechecks of
			// what containers need do not apply.
			opts.NoContainers = dist == v1.DistroLocal
			st, err := state.Load(f.dataDir)
			switch {
			case errors.Is(err, state.ErrNoState) && f.credentials != "" && f.passphrase != "":
				if err := f.fetch(cmd.Context(), log); err != nil {
					return err
				}
				// A machine may boot while its controller restarts: it keeps
				// trying to register (a refusal stops it at once).
				if st, err = agent.JoinPatiently(cmd.Context(), opts, joinPatience); err != nil {
					return err
				}
			case errors.Is(err, state.ErrNoState):
				return usageError{fmt.Errorf("%s has no node identity: run kiln-agent join, or give --credentials and --passphrase", f.dataDir)}
			case err != nil:
				return err
			}
			var exec agent.Executor = agent.NoDistribution{}
			if kube, what := newExecutor(dist, kubeBinary, f.root, registry(st.Controller, f.dataDir), log); kube != nil {
				defer kube.Close()
				// What a crashed or stopped agent left running is
				// supervised again.
				if err := kube.Resume(); err != nil {
					log.Warn("could not resume the "+what+" of the last install", "err", err)
				}
				exec = kube
			}
			var notices func(context.Context) (*v1.Interruption, error)
			switch spotNotices {
			case "":
			case "imds":
				notices = spotnotice.New().Notice
			default:
				return usageError{fmt.Errorf("--spot-notices %q: want imds (or nothing)", spotNotices)}
			}
			return agent.Run(cmd.Context(), agent.RunOptions{
				Notices:           notices,
				DataDir:           f.dataDir,
				Executor:          exec,
				HeartbeatInterval: heartbeat,
				Root:              f.root,
				Hostname:          f.hostname,
				PrivateRoot:       f.privateRoot,
				NoContainers:      opts.NoContainers,
				BindAddress:       f.bind,
				Logger:            log,
				Now:               opts.Now,
			})
		},
	}
	cmd.SetOut(stdout)
	f.register(cmd, "the cluster's credentials file, to join first when --data-dir has no identity")
	cmd.Flags().DurationVar(&heartbeat, "heartbeat", agent.DefaultHeartbeatInterval, "heartbeat interval until the controller sets one")
	cmd.Flags().StringVar(&kubeBinary, "kube-binary", "", "kiln-kube for the local distribution: a directory of kiln-kube-VERSION programs (an install runs the one of its Kubernetes version), or one kiln-kube program (installs its own version only)")
	cmd.Flags().StringVar(&spotNotices, "spot-notices", "", "imds: ask the instance metadata service (IMDSv2 spot/instance-action) every 5s whether the cloud\nwill take this machine away, and tell the controller, which drains and replaces the node")
	cmd.Flags().StringVar(&distribution, "distribution", "", "how to install Kubernetes: local, kiln or kubeadm (default: local with --kube-binary, otherwise none)")
	return cmd
}

// nodeDistribution is the node's side of a distribution (spec.distribution):
// the executor of kiln-agent's that carries out its install and reset
// instructions, which resumes what the last install runs when the agent
// starts, and lets it run on when the agent stops (Close).
type nodeDistribution interface {
	agent.Executor
	Resume() error
	Close()
}

var (
	_ nodeDistribution = (*local.Executor)(nil)
	_ nodeDistribution = kiln.Executor{}
	_ nodeDistribution = (*kubeadm.Executor)(nil)
)

// newExecutor is the executor of distribution dist (chooseDistribution's),
// and what it runs (for the log); nil for none.
func newExecutor(dist, kubeBinary, root string, reg *mirror.Mirror, log *slog.Logger) (nodeDistribution, string) {
	switch dist {
	case v1.DistroLocal:
		// Kubernetes components from kiln-kube, children of this agent,
		// under root, with a hollow kubelet.
		return &local.Executor{KubeBinary: kubeBinary, Root: root, Logger: log}, "components"
	case v1.DistroKiln:
		// The same, with the real kubelet on the node's containerd,
		// kube-proxy and the pod network; every pull goes to the
		// controller's registry (its agent listener), with the node's
		// certificate files.
		return kiln.NewExecutor(kiln.Options{KubeBinary: kubeBinary, Root: root, Logger: log, Mirror: reg}), "components"
	case v1.DistroKubeadm:
		log.Info("installing with kubeadm on this host", "root", root)
		// The services of an install from Kiln run on; a restarted agent
		// supervises them again.
		return &kubeadm.Executor{Root: root, Logger: log, Registry: reg}, "services"
	}
	return nil, ""
}

// registry is Kiln's registry as a node reaches it: on the controller's
// agent listener, with the node's certificate files the agent keeps current.
func registry(controller, dataDir string) *mirror.Mirror {
	return &mirror.Mirror{URL: controller,
		CAFile:   filepath.Join(dataDir, state.TLSControllerCAFile),
		CertFile: filepath.Join(dataDir, state.TLSCertFile),
		KeyFile:  filepath.Join(dataDir, state.TLSKeyFile)}
}

// geteuid is os.Geteuid; tests replace it.
var geteuid = os.Geteuid

// chooseDistribution checks --distribution against --kube-binary and
// --root and returns the distribution to install with: v1.DistroLocal,
// v1.DistroKubeadm or "" for none.
func chooseDistribution(distribution, kubeBinary, root string) (string, error) {
	switch distribution {
	case "":
		if kubeBinary != "" {
			return v1.DistroLocal, nil
		}
		return "", nil
	case v1.DistroLocal, v1.DistroKiln:
		if kubeBinary == "" {
			return "", usageError{fmt.Errorf("--distribution %s needs --kube-binary, the kiln-kube program its components run from", distribution)}
		}
	case v1.DistroKubeadm:
		if kubeBinary != "" {
			return "", usageError{errors.New("--kube-binary is the local distribution's: leave it out with --distribution kubeadm")}
		}
		if filepath.Clean(root) == "/" && geteuid() != 0 {
			return "", errors.New("--distribution kubeadm installs packages, writes under /etc and runs kubeadm on this host: " +
				"run kiln-agent as root")
		}
	default:
		return "", usageError{fmt.Errorf("--distribution %q: want local, kiln or kubeadm", distribution)}
	}
	return distribution, nil
}
