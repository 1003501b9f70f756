package kubeadm

import (
	"archive/tar"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"kiln.dev/kiln/internal/agent/mirror"
	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
)

// errImageMissing: Kiln's registry does not have the image.
var errImageMissing = errors.New("not in Kiln's registry")

// fileMissingError: the image has no file File. It matches fs.ErrNotExist.
type fileMissingError struct{ Image, File string }

func (e *fileMissingError) Error() string {
	return fmt.Sprintf("image %s has no file %s", e.Image, e.File)
}

func (e *fileMissingError) Is(target error) bool { return target == fs.ErrNotExist }

// fetch copies f.File out of f.Image, pulled from Kiln's registry (reg)
// with the node's certificate, to f.Path under root: a temporary file
// beside it, renamed over it once complete.
func fetch(ctx context.Context, reg *mirror.Mirror, root string, f *distrokubeadm.Fetch) error {
	if reg == nil {
		return errors.New("this agent has no registry to pull from (kiln-agent run --distribution kubeadm sets it to its controller)")
	}
	u, err := url.Parse(reg.URL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("registry URL %q: want https://HOST:PORT", reg.URL)
	}
	image, err := name.ParseReference(f.Image)
	if err != nil {
		return fmt.Errorf("image %q: %w", f.Image, err)
	}
	// A node names an image without its registry host (internal/registry):
	// kiln.dev/kube:v1.36.3 is kube:v1.36.3 at Kiln's registry.
	delim := ":"
	if _, ok := image.(name.Digest); ok {
		delim = "@"
	}
	ref, err := name.ParseReference(u.Host + "/" + image.Context().RepositoryStr() + delim + image.Identifier())
	if err != nil {
		return fmt.Errorf("image %q: %w", f.Image, err)
	}
	tr, err := registryTransport(reg)
	if err != nil {
		return err
	}
	img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithTransport(tr))
	var te *transport.Error
	if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%s: %w (kilnd seeds it at start from its --system-images directory: make system-images)", f.Image, errImageMissing)
	}
	if err != nil {
		return fmt.Errorf("pull %s from %s: %w", f.Image, u.Host, err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	files := tar.NewReader(rc)
	for {
		h, err := files.Next()
		if err == io.EOF {
			return &fileMissingError{Image: f.Image, File: f.File}
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", f.Image, err)
		}
		if path.Clean(strings.TrimPrefix(h.Name, "./")) != f.File {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return fmt.Errorf("image %s: %s is not a regular file", f.Image, f.File)
		}
		return writeFetched(filepath.Join(root, filepath.FromSlash(f.Path)), files)
	}
}

// writeFetched writes r to dest, mode 0755, through a temporary file.
func writeFetched(dest string, r io.Reader) error {
	if err := mkdirAll(filepath.Dir(dest)); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", dest, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}

// registryTransport presents the node's certificate and trusts the CA of
// Kiln's agent listener, reading the files the agent keeps current.
func registryTransport(reg *mirror.Mirror) (http.RoundTripper, error) {
	pair, err := tls.LoadX509KeyPair(reg.CertFile, reg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("the node's certificate: %w", err)
	}
	caPEM, err := os.ReadFile(reg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("the controller's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("the controller's CA: %s holds no PEM certificate", reg.CAFile)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}
