package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/state"
	distro "kiln.dev/kiln/internal/distro/local"
)

var errMissingJoinFlags = errors.New("--credentials and --passphrase are required to join")

func newRunCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		f          joinFlags
		heartbeat  time.Duration
		kubeBinary string
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Hold the node's session with the controller and run its instructions",
		Long: "Connects to the controller with the node identity in --data-dir, reports facts, prechecks,\n" +
			"heartbeats and logs, and runs the instructions it receives, reconnecting until stopped.\n" +
			"Without an identity and with --credentials and --passphrase it joins first, so one command\n" +
			"line starts a node.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newLogger(stderr)
			if err := f.absolute(); err != nil {
				return err
			}
			_, err := state.Load(f.dataDir)
			switch {
			case errors.Is(err, state.ErrNoState) && f.credentials != "" && f.passphrase != "":
				if _, err := agent.Join(cmd.Context(), f.options(log)); err != nil {
					return err
				}
			case errors.Is(err, state.ErrNoState):
				return usageError{fmt.Errorf("%s has no node identity: run kiln-agent join, or give --credentials and --passphrase", f.dataDir)}
			case err != nil:
				return err
			}
			var exec agent.Executor = agent.NoDistribution{}
			if kubeBinary != "" {
				// The local distribution: Kubernetes components from kiln-kube,
				// children of this agent, under --root.
				local := &distro.Executor{KubeBinary: kubeBinary, Root: f.root, Logger: log}
				defer local.Close()
				// Components a crashed agent left running are supervised again.
				if err := local.Resume(); err != nil {
					log.Warn("could not resume the components of the last install", "err", err)
				}
				exec = local
			}
			return agent.Run(cmd.Context(), agent.RunOptions{
				DataDir:           f.dataDir,
				Executor:          exec,
				HeartbeatInterval: heartbeat,
				Root:              f.root,
				BindAddress:       f.bind,
				Logger:            log,
			})
		},
	}
	cmd.SetOut(stdout)
	f.register(cmd, "the cluster's credentials file, to join first when --data-dir has no identity")
	cmd.Flags().DurationVar(&heartbeat, "heartbeat", agent.DefaultHeartbeatInterval, "heartbeat interval until the controller sets one")
	cmd.Flags().StringVar(&kubeBinary, "kube-binary", "", "kiln-kube: a directory of kiln-kube-VERSION programs (an install runs the one of its Kubernetes version), or one kiln-kube program (installs its own version only); without it, install instructions fail")
	return cmd
}
