package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/internal/lb"
)

// newProxyCommand is a TCP load balancer of several ports (internal/lb's
// Set): what the docker provider runs, in a container of the node image,
// as the load balancer of a Service of type LoadBalancer
// (docs/provider-docker.md).
func newProxyCommand(stderr io.Writer) *cobra.Command {
	var config, initial, listen string
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Forward TCP ports to backends (a Service's load balancer on docker clusters)",
		Long: "Listens on each port of --config (JSON: {\"ports\": [{\"port\": 80, \"backends\": [\"10.0.0.2:30080\"]}]})\n" +
			"and forwards each connection to one of the port's backends, round-robin, those that accepted a\n" +
			"connection at the last check (every second) first. SIGHUP reads the file again: new ports open,\n" +
			"dropped ones close, the others forward to their new backends while their open connections stay.\n" +
			"--initial is the configuration to start with while the file does not exist (the docker provider\n" +
			"starts a Service's load balancer with it, so nothing is copied into the container first).\n" +
			"It runs until SIGTERM or SIGINT.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config == "" {
				return usageError{fmt.Errorf("--config is required")}
			}
			log := newLogger(stderr)
			c, err := lb.ReadConfig(config)
			if errors.Is(err, fs.ErrNotExist) && initial != "" {
				c, err = lb.ParseConfig("--initial", []byte(initial))
			}
			if err != nil {
				return err
			}
			s := lb.NewSet(listen, lb.Accepts(), log)
			defer s.Close()
			if err := s.Apply(c); err != nil {
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			for {
				select {
				case <-cmd.Context().Done():
					return nil
				case <-hup:
					c, err := lb.ReadConfig(config)
					if err != nil {
						log.Error("kept the last configuration: the new one is unreadable", "err", err)
						continue
					}
					if err := s.Apply(c); err != nil {
						log.Error("applying the new configuration", "err", err)
						continue
					}
					log.Info("configuration applied", "ports", len(c.Ports))
				}
			}
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "the JSON file of ports and backends")
	cmd.Flags().StringVar(&initial, "initial", "", "the JSON configuration to start with while the --config file does not exist")
	cmd.Flags().StringVar(&listen, "listen", "", "the address to listen on (default every address)")
	return cmd
}
