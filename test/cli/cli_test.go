// Package cli runs kiln CLI sessions, written as testscript files in
// testdata/, against a real kilnd (the dev assembly, in this process, on
// loopback). Each script gets its own kilnd and data dir.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/chartfile/charttest"
	"kiln.dev/kiln/internal/cli"
	"kiln.dev/kiln/internal/daemon"
	"kiln.dev/kiln/internal/oidc"
	"kiln.dev/kiln/internal/provider/sim"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/test/kilndtest"
	"kiln.dev/kiln/test/ocitest"
	"kiln.dev/kiln/test/oidcprovider"
	"kiln.dev/kiln/test/waitfor"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"kiln": func() { os.Exit(cli.Main()) },
		// The browser of a person signing in ($BROWSER of kiln login --oidc).
		"oidc-browser": func() { os.Exit(oidcprovider.BrowserMain()) },
	})
}

// scriptTB is a script's testing.TB for helpers that wait: a failure
// fails the script.
type scriptTB struct {
	testing.TB
	ts *testscript.TestScript
}

func (s scriptTB) Helper()                           {}
func (s scriptTB) Fatalf(format string, args ...any) { s.ts.Fatalf(format, args...) }

func TestScripts(t *testing.T) {
	// The agent edge installers hold (kilnd serves the one beside it).
	bin := t.TempDir()
	if err := kilndtest.Build(bin, "kiln.dev/kiln/cmd/kiln-agent"); err != nil {
		t.Fatal(err)
	}
	// The organisation's identity provider every script's kilnd trusts: its
	// ID tokens last 50 s, so that every command after a sign-in renews it.
	idp := oidcprovider.Start(t, oidcprovider.Options{IDTokenLifetime: 50 * time.Second},
		oidcprovider.User{Name: "ann", Password: "ann-pw", Email: "ann@example.com", Groups: []string{"eng", "platform/admins"}},
		oidcprovider.User{Name: "bob", Password: "bob-pw", Email: "bob@example.com"})
	stores := map[string]store.Store{} // by work dir: the kilnd of each script
	var mu sync.Mutex
	testscript.Run(t, testscript.Params{
		Dir: "testdata",
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// agent-registers CLUSTER NODE STATE [failed-precheck]: what an
			// agent's registration writes (the agent itself is another issue).
			"agent-registers": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) < 3 {
					ts.Fatalf("usage: agent-registers CLUSTER NODE STATE [failed-precheck]")
				}
				mu.Lock()
				st := stores[ts.Getenv("WORK")]
				mu.Unlock()
				n := &store.Node{Project: "default", Node: v1.Node{Name: args[1], Cluster: args[0], State: args[2],
					Facts: &v1.NodeFacts{Hostname: args[1], Interfaces: []v1.Interface{{Name: "eth0"}}}}}
				if len(args) > 3 {
					n.Prechecks = []v1.PrecheckResult{{Name: args[3], Result: v1.PrecheckFail, Message: "failed on purpose"}}
				}
				k := store.Key{Project: "default", Name: args[0]}
				ts.Check(st.PutNode(context.Background(), n, store.Cond{}))
				ts.Check(st.AppendNodeLogs(context.Background(), k, args[1], []v1.LogLine{
					{Stream: "agent", Line: "prechecks passed"}, {Stream: "agent", Line: "registered as " + args[1]}}))
			},
			// agent-logs CLUSTER NODE STREAM LINE...: log lines a node's
			// agent sends, one per LINE, of the stream (agent or a
			// component).
			"agent-logs": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) < 4 {
					ts.Fatalf("usage: agent-logs CLUSTER NODE STREAM LINE...")
				}
				mu.Lock()
				st := stores[ts.Getenv("WORK")]
				mu.Unlock()
				var lines []v1.LogLine
				for _, l := range args[3:] {
					lines = append(lines, v1.LogLine{Time: time.Now(), Stream: args[2], Line: l})
				}
				ts.Check(st.AppendNodeLogs(context.Background(), store.Key{Project: "default", Name: args[0]}, args[1], lines))
			},
			// await-file FILE REGEXP: wait (up to a minute) until FILE,
			// which a background command writes, matches REGEXP
			// (multi-line).
			"await-file": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 2 {
					ts.Fatalf("usage: await-file FILE REGEXP")
				}
				re, err := regexp.Compile("(?m)" + args[1])
				ts.Check(err)
				waitfor.Cond(scriptTB{t, ts}, args[0]+" to match "+args[1], time.Minute, func() (bool, error) {
					b, err := os.ReadFile(ts.MkAbs(args[0]))
					return err == nil && re.Match(b), nil
				})
			},
			// step-running OP STEP: wait (up to a minute) until the
			// operation's step is Running, so that what the script does
			// next happens while it runs, however slow the machine.
			"step-running": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 2 {
					ts.Fatalf("usage: step-running OP STEP")
				}
				mu.Lock()
				st := stores[ts.Getenv("WORK")]
				mu.Unlock()
				what := fmt.Sprintf("step %s of operation %s to be Running", args[1], args[0])
				waitfor.Cond(scriptTB{t, ts}, what, time.Minute, func() (bool, error) {
					op, err := st.GetOperation(context.Background(), args[0])
					if err != nil {
						return false, err
					}
					for _, step := range op.Steps {
						if step.Name == args[1] && step.State == v1.StepRunning {
							return true, nil
						}
					}
					return false, waitfor.NotYet(fmt.Errorf("steps %+v", op.Steps))
				})
			},
			// mkimage FILE NAME:TAG...: write a docker save archive of
			// random images (small layers), one per NAME:TAG.
			"mkimage": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) < 2 {
					ts.Fatalf("usage: mkimage FILE NAME:TAG...")
				}
				var images []ocitest.Named
				for _, a := range args[1:] {
					images = append(images, ocitest.Named{Name: a, Image: ocitest.Random(scriptTB{t, ts}, 1024)})
				}
				ocitest.WriteDockerArchive(scriptTB{t, ts}, ts.MkAbs(args[0]), images...)
			},
			// mklayout DIR NAME:TAG: write an OCI image layout holding a
			// random image, its name in the io.containerd.image.name
			// annotation (as containerd and buildah record it).
			"mklayout": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 2 {
					ts.Fatalf("usage: mklayout DIR NAME:TAG")
				}
				ocitest.WriteLayout(scriptTB{t, ts}, ts.MkAbs(args[0]), ocitest.Named{Name: args[1], Image: ocitest.Random(scriptTB{t, ts}, 1024)})
			},
			// mkociarchive FILE NAME:TAG: write an OCI archive (an OCI
			// image layout in a tar, as scripts/oci-archive.sh and ctr
			// images export write) holding a random image, named as
			// mklayout names it.
			"mkociarchive": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 2 {
					ts.Fatalf("usage: mkociarchive FILE NAME:TAG")
				}
				ocitest.WriteOCIArchive(scriptTB{t, ts}, ts.MkAbs(args[0]), ocitest.Named{Name: args[1], Image: ocitest.Random(scriptTB{t, ts}, 1024)})
			},
			// mkchart FILE NAME VERSION: write a Helm chart archive (what
			// helm package writes) of chart NAME at VERSION, with one
			// template.
			"mkchart": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 3 {
					ts.Fatalf("usage: mkchart FILE NAME VERSION")
				}
				data := charttest.Archive(scriptTB{t, ts}, args[1], args[2], map[string]string{
					"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n",
				})
				ts.Check(os.WriteFile(ts.MkAbs(args[0]), data, 0o644))
			},
			// capture VAR REGEXP [FILE]: set VAR to the first submatch of
			// REGEXP (multi-line) in FILE, by default the last stdout: a
			// token's value or id for the commands after.
			"capture": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) < 2 || len(args) > 3 {
					ts.Fatalf("usage: capture VAR REGEXP [FILE]")
				}
				file := "stdout"
				if len(args) == 3 {
					file = args[2]
				}
				re, err := regexp.Compile("(?m)" + args[1])
				ts.Check(err)
				m := re.FindStringSubmatch(ts.ReadFile(file))
				if len(m) < 2 {
					ts.Fatalf("capture: no match for %q in %s", args[1], file)
				}
				ts.Setenv(args[0], m[1])
			},
		},
		Setup: func(env *testscript.Env) error {
			dataDir := filepath.Join(env.WorkDir, ".kilnd")
			d, err := daemon.Start(context.Background(), daemon.Config{
				DataDir:     dataDir,
				Listen:      "127.0.0.1:0",
				AgentListen: "127.0.0.1:0",
				AgentBinary: filepath.Join(bin, "kiln-agent"),
				Dev:         true,
				// The scripts' clusters are local (hollow) unless they say: a docker
				// provider registered on this machine is not the default here.
				DefaultProvider: "local",
				Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
				OIDC:            []oidc.Issuer{{URL: idp.URL, ClientID: oidcprovider.CLIClient}},
			})
			if err != nil {
				return err
			}
			mu.Lock()
			stores[env.WorkDir] = d.Store
			mu.Unlock()
			env.Defer(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				d.Shutdown(ctx)
				// Local machines outlive kilnd by design; a script's must
				// not outlive the script.
				for _, p := range kilndtest.KillProcessesUnder(dataDir) {
					env.T().Log("killed a process the script left: " + p)
				}
			})
			// The server is known; logging in is each script's business.
			// kilnd serves HTTPS from the CA it made in its data dir.
			env.Setenv("SERVER", d.URL)
			env.Setenv("TOKEN_FILE", filepath.Join(dataDir, "admin.token"))
			env.Setenv("CA_FILE", d.CAFile)
			env.Setenv("ADDR", d.Addr)
			env.Setenv("XDG_CONFIG_HOME", filepath.Join(env.WorkDir, ".config"))
			// The secret the sim provider accepts for access key AKTEST.
			env.Setenv("SIM_SECRET", sim.SecretFor("AKTEST"))
			env.Setenv("IDP", idp.URL)
			return nil
		},
	})
}
