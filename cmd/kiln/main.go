// Command kiln is the Kiln command line. See docs/cli.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"kiln.dev/kiln/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Environ())
	stop()
	os.Exit(code)
}
