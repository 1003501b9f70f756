package daemon

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/docker"
)

// dockerClient returns a client of the Docker engine, or skips the test
// saying why.
func dockerClient(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err == nil {
		_, err = cli.Ping(t.Context(), client.PingOptions{NegotiateAPIVersion: true})
	}
	if err != nil {
		t.Skipf("no Docker engine answers (%v): the docker provider's registration is not tested", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// kilnd registers the docker provider when the engine answers and a node
// image is there; --dev goes on without it when there is none, an explicit
// --docker does not start.
func TestDockerRegistration(t *testing.T) {
	cli := dockerClient(t)
	b := make([]byte, 4)
	rand.Read(b)
	repo := "kiln-test/daemon-node-" + hex.EncodeToString(b)

	d := startTLS(t, Config{Dev: true, DockerNodeImage: repo})
	if d.docker != nil {
		t.Errorf("dev kilnd registered the docker provider without a node image")
	}
	_, err := Start(t.Context(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0",
		Docker: true, Local: true, DockerNodeImage: repo, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if !errors.Is(err, docker.ErrNoImage) {
		t.Errorf("kilnd --docker without a node image: %v, want %v", err, docker.ErrNoImage)
	}

	// An image with one empty file is enough to be found.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "empty", Mode: 0o644})
	tw.Close()
	ref := repo + ":v1.36.3"
	res, err := cli.ImageImport(t.Context(), client.ImageImportSource{Source: &buf, SourceName: "-"}, ref, client.ImageImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res)
	res.Close()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: true})
	})
	d = startTLS(t, Config{Dev: true, DockerNodeImage: repo})
	if d.docker == nil {
		t.Fatalf("dev kilnd did not register the docker provider with %s there", ref)
	}
	if got := d.docker.Distributions()[v1.DistroKiln]; !slices.Equal(got, []string{"v1.36.3"}) {
		t.Errorf("docker provider offers %v, want the version with an image", d.docker.Distributions())
	}
}
