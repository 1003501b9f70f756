// Package cli runs kiln CLI sessions, written as testscript files in
// testdata/, against a real kilnd (the dev assembly, in this process, on
// loopback). Each script gets its own kilnd and data dir.
package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"kiln.dev/kiln/internal/cli"
	"kiln.dev/kiln/internal/daemon"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"kiln": func() { os.Exit(cli.Main()) },
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata",
		Setup: func(env *testscript.Env) error {
			dataDir := filepath.Join(env.WorkDir, ".kilnd")
			d, err := daemon.Start(context.Background(), daemon.Config{
				DataDir: dataDir,
				Listen:  "127.0.0.1:0",
				Dev:     true,
				Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				return err
			}
			env.Defer(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				d.Shutdown(ctx)
			})
			// The server is known; logging in is each script's business.
			env.Setenv("SERVER", "http://"+d.Addr)
			env.Setenv("TOKEN_FILE", filepath.Join(dataDir, "admin.token"))
			env.Setenv("XDG_CONFIG_HOME", filepath.Join(env.WorkDir, ".config"))
			return nil
		},
	})
}
