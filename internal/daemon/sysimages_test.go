package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"kiln.dev/kiln/internal/imagefile"
	"kiln.dev/kiln/internal/sysimages"
	"kiln.dev/kiln/test/ocitest"
	"kiln.dev/kiln/test/testlog"
)

// kilnd seeds every archive of --system-images into kiln.system at start,
// one log line per image; a restart finds them there and writes nothing.
func TestSystemImagesAreSeededAtStart(t *testing.T) {
	images := t.TempDir()
	coredns := ocitest.Named{Name: sysimages.CoreDNSImage, Image: ocitest.Random(t, 1024)}
	demo := ocitest.Named{Name: sysimages.DemoImage, Image: ocitest.Random(t, 1024)}
	ocitest.WriteOCIArchive(t, filepath.Join(images, "coredns.tar"), coredns)
	ocitest.WriteOCIArchive(t, filepath.Join(images, "demo.tar"), demo)
	// Not archives of the directory: skipped.
	os.WriteFile(filepath.Join(images, ".coredns.inputs"), []byte("0123\n"), 0o644)
	os.WriteFile(filepath.Join(images, "README"), []byte("not an image\n"), 0o644)
	os.Mkdir(filepath.Join(images, "old.tar"), 0o755)

	dataDir := t.TempDir()
	start := func() (*Daemon, *testlog.Buffer) {
		t.Helper()
		var logs testlog.Buffer
		d, err := Start(t.Context(), Config{DataDir: dataDir, Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", Dev: true,
			SystemImages: images, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return d, &logs
	}
	d, logs := start()
	for _, want := range []string{
		`msg="system image seeded" image=kiln.dev/coredns:1.15.0 stored=kiln.system/library/coredns:1.15.0 digest=` + ocitest.Digest(t, coredns.Image),
		`msg="system image seeded" image=kiln.dev/demo:1 stored=kiln.system/library/demo:1 digest=` + ocitest.Digest(t, demo.Image),
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log has no %q:\n%s", want, logs.String())
		}
	}
	if n := strings.Count(logs.String(), `msg="system image `); n != 2 {
		t.Errorf("%d lines about system images, want one per archive:\n%s", n, logs.String())
	}

	// Every token pulls it from kiln.system, by the name pods use.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(d.CACert)
	ref, _ := name.ParseReference(strings.TrimPrefix(d.URL, "https://") + "/kiln.system/coredns:1.15.0")
	img, err := remote.Image(ref, remote.WithAuth(&authn.Bearer{Token: d.Token}),
		remote.WithTransport(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}))
	if err != nil {
		t.Fatalf("pull kiln.system/coredns:1.15.0: %v", err)
	}
	if got := ocitest.Digest(t, img); got != ocitest.Digest(t, coredns.Image) {
		t.Errorf("kiln.system/coredns:1.15.0 is %s, want the seeded %s", got, ocitest.Digest(t, coredns.Image))
	}
	d.Shutdown(t.Context())

	d, logs = start()
	defer d.Shutdown(t.Context())
	if n := strings.Count(logs.String(), `msg="system image already there"`); n != 2 || strings.Contains(logs.String(), `msg="system image seeded"`) {
		t.Errorf("after a restart: %d images already there, want 2 and none seeded:\n%s", n, logs.String())
	}
}

func TestSystemImagesDirectory(t *testing.T) {
	broken := t.TempDir()
	os.WriteFile(filepath.Join(broken, "coredns.tar"), []byte("half an archive"), 0o644)
	for _, tc := range []struct {
		name, dir string
		err       error  // the error of Start matches it
		flag      string // and is a *FlagError of it
		log       string // else a line of its log
	}{
		{name: "default, missing", dir: "", log: `msg="no system images to seed: their directory does not exist`},
		{name: "named, empty", dir: t.TempDir(), log: `msg="no system images to seed: their directory holds no archive (*.tar)"`},
		{name: "named, missing", dir: filepath.Join(t.TempDir(), "nothing"), err: fs.ErrNotExist, flag: "--system-images"},
		// coredns.tar, the one archive there.
		{name: "a broken archive", dir: broken, err: imagefile.ErrNotImageFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testlog.Buffer
			d, err := Start(t.Context(), Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AgentListen: "127.0.0.1:0", Dev: true,
				SystemImages: tc.dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err == nil {
				d.Shutdown(t.Context())
			}
			var fe *FlagError
			switch {
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Errorf("Start: %v, want %v", err, tc.err)
			case tc.flag != "" && (!errors.As(err, &fe) || fe.Flag != tc.flag || fe.Value != tc.dir):
				t.Errorf("Start: %v, want a *FlagError of %s %s", err, tc.flag, tc.dir)
			case tc.err == nil && err != nil:
				t.Errorf("Start: %v", err)
			case tc.err == nil && !strings.Contains(logs.String(), tc.log):
				t.Errorf("the log has no %q:\n%s", tc.log, logs.String())
			}
		})
	}
}
