package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/nodeimage"
	"kiln.dev/kiln/test/testlog"
	"kiln.dev/kiln/test/waitfor"
)

// The test image: one static binary, testdata/fakeagent, as /kiln-agent,
// imported with `docker import` semantics (nothing can be pulled here). It
// is built once per test binary and removed when the tests end.
const testVersion = "v1.36.3"

var (
	testImage  string // repository; the image is testImage:testVersion
	skipReason string // why the tests that need Docker skip
	testSecret = "s3cret-" + randomHex(8)
)

func TestMain(m *testing.M) {
	cleanup, err := buildImage()
	if err != nil {
		skipReason = err.Error()
	}
	code := m.Run()
	if cleanup != nil {
		cleanup()
	}
	os.Exit(code)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// buildImage builds the fake agent and imports it as testImage.
func buildImage() (func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("no Docker client: %v", err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("no Docker engine answers (%v); start one (the project's scripts install docker.io) to run the docker provider's tests", err)
	}
	dir, err := os.MkdirTemp("", "kiln-docker-test")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "kiln-agent")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./testdata/fakeagent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the fake agent: %v\n%s", err, out)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"etc/", "tmp/", "var/"} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755})
	}
	// At / for the machines' command, and where the node image has it
	// (nodeimage.AgentPath) for the Service load balancers' proxy.
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/"} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755})
	}
	for _, name := range []string{"kiln-agent", strings.TrimPrefix(nodeimage.AgentPath, "/")} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(exe))})
		tw.Write(exe)
	}
	tw.Close()
	testImage = "kiln-test/node-" + randomHex(4)
	res, err := cli.ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, testImage+":"+testVersion, client.ImageImportOptions{})
	if err != nil {
		return nil, fmt.Errorf("import the test image: %v", err)
	}
	io.Copy(io.Discard, res)
	res.Close()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cli.ImageRemove(ctx, testImage+":"+testVersion, client.ImageRemoveOptions{Force: true})
		cli.Close()
	}, nil
}

type testOpts struct {
	instance string // default: a new one
	exit     string // the fake agent exits with this status at once
	forwards map[string]string
	alias    string
	// privileged: Options.PrivilegedPods.
	privileged bool
}

// newDocker returns a provider over the engine, with an instance of its own
// whose containers run the fake agent; everything of the instance is
// removed when the test ends, whatever the provider did.
func newDocker(t *testing.T, o testOpts) *Docker {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if o.instance == "" {
		o.instance = "t" + randomHex(4)
	}
	d, err := New(t.Context(), Options{
		Instance: o.instance,
		Image:    testImage,
		Versions: []string{"v1.35.4", testVersion},
		Command: func(ctx context.Context, m Machine) (Agent, error) {
			args := []string{"/kiln-agent", "run", m.Name}
			if o.exit != "" {
				args = append(args, o.exit)
			}
			if m.Bootstrap != nil {
				// The real join files; the fake agent in place of kiln-agent.
				a, err := AgentContainer(testController)(ctx, m)
				a.Args, a.Env = args, []string{"KILN_GATEWAY=" + m.Gateway}
				return a, err
			}
			return Agent{
				Args: args,
				Env:  []string{"KILN_GATEWAY=" + m.Gateway},
				Files: []File{
					{Path: "/etc/kiln/credentials.json", Mode: 0o600, Data: []byte(`{"secret":"` + testSecret + `"}`)},
					{Path: "/etc/kiln/passphrase", Mode: 0o600, Data: []byte(testSecret + "\n")},
				},
			}, nil
		},
		Logger:         testLogger(t),
		Forwards:       o.forwards,
		HostAlias:      o.alias,
		PrivilegedPods: o.privileged,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		removeInstance(t, d.cli, o.instance)
	})
	return d
}

// removeInstance removes every container, volume and network labelled with
// the instance.
func removeInstance(t *testing.T, cli *client.Client, instance string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := client.Filters{}.Add("label", LabelInstance+"="+instance)
	cs, _ := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	for _, c := range cs.Items {
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			t.Errorf("cleanup: remove container %s: %v", c.Names, err)
		}
	}
	vs, _ := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	for _, v := range vs.Items {
		if _, err := cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil {
			t.Errorf("cleanup: remove volume %s: %v", v.Name, err)
		}
	}
	ns, _ := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	for _, n := range ns.Items {
		if _, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil {
			t.Errorf("cleanup: remove network %s: %v", n.Name, err)
		}
	}
}

// removeMarked removes the containers and networks a test made outside
// the provider (labelled kiln.dev/test=mark).
func removeMarked(t *testing.T, cli *client.Client, mark string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := client.Filters{}.Add("label", "kiln.dev/test="+mark)
	cs, _ := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	for _, c := range cs.Items {
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			t.Errorf("cleanup: remove container %s: %v", c.Names, err)
		}
	}
	ns, _ := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	for _, n := range ns.Items {
		if _, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil {
			t.Errorf("cleanup: remove network %s: %v", n.Name, err)
		}
	}
}

func testLogger(t *testing.T) *slog.Logger { return testlog.New(t, slog.LevelDebug) }

// greet connects to addr and returns the first line, the name of the fake
// agent that answered.
func greet(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read greeting from %s: %w", addr, err)
	}
	return strings.TrimSuffix(line, "\n"), nil
}

// greetEventually waits until addr answers with a greeting.
func greetEventually(t *testing.T, addr string) string {
	t.Helper()
	var name string
	waitfor.Cond(t, "an answer from "+addr, 20*time.Second, func() (bool, error) {
		var err error
		name, err = greet(addr)
		return err == nil, waitfor.NotYet(err)
	})
	return name
}

// testController is the address the test's machines are told to reach
// the agent gateway at.
const testController = "https://kilnd.test.internal:7443"

// readFileIn returns the file at path in the container.
func readFileIn(ctx context.Context, cli *client.Client, id, path string) ([]byte, error) {
	res, err := cli.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: path})
	if err != nil {
		return nil, err
	}
	defer res.Content.Close()
	tr := tar.NewReader(res.Content)
	if _, err := tr.Next(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return io.ReadAll(tr)
}

// execIn runs cmd in the container and returns its output and exit code.
func execIn(t *testing.T, cli *client.Client, id string, cmd ...string) (string, int) {
	t.Helper()
	ctx := t.Context()
	ex, err := cli.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatalf("exec %v: %v", cmd, err)
	}
	att, err := cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("exec %v: attach: %v", cmd, err)
	}
	defer att.Close()
	var out bytes.Buffer
	stdcopy.StdCopy(&out, &out, att.Reader)
	in, err := cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err != nil {
		t.Fatalf("exec %v: inspect: %v", cmd, err)
	}
	return out.String(), in.ExitCode
}

// logs returns what the container wrote.
func logs(t *testing.T, cli *client.Client, id string) string {
	t.Helper()
	rc, err := cli.ContainerLogs(t.Context(), id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("logs: %v", err)
	}
	defer rc.Close()
	var out bytes.Buffer
	stdcopy.StdCopy(&out, &out, rc)
	return out.String()
}

func wantFailure(t *testing.T, err error, code string, retryable bool) *failure.Error {
	t.Helper()
	var e *failure.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not a failure.Error", err)
	}
	if e.Code != code || e.Retryable != retryable {
		t.Fatalf("error = code %q retryable %v (%v), want code %q retryable %v", e.Code, e.Retryable, err, code, retryable)
	}
	return e
}
