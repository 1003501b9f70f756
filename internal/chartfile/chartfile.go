// Package chartfile reads a Helm chart archive (a gzipped tar whose top
// directory holds Chart.yaml) and makes of it the OCI artifact Helm pushes
// to a registry: a config of Helm's config media type holding the chart's
// metadata, and one layer, the archive. kiln chart push sends it; kilnd
// seeds the charts Kiln ships the same way, and reads both back.
package chartfile

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// Helm's media types for a chart in an OCI registry.
const (
	ConfigMediaType = "application/vnd.cncf.helm.config.v1+json"
	LayerMediaType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// Repository is where a chart named name is kept in a project's part of
// Kiln's registry.
func Repository(name string) string { return "charts/" + name }

// MaxArchive bounds a chart archive.
const MaxArchive = 10 << 20

// Meta is the part of Chart.yaml Kiln reads.
type Meta struct {
	APIVersion  string `json:"apiVersion"`
	Name        string `json:"name"`
	Version     string `json:"version"`
	AppVersion  string `json:"appVersion,omitempty"`
	Description string `json:"description,omitempty"`
	Type        string `json:"type,omitempty"`
}

// Read returns the metadata of the chart archive data.
func Read(data []byte) (Meta, error) {
	if len(data) > MaxArchive {
		return Meta{}, fmt.Errorf("the archive is %d bytes; at most %d", len(data), MaxArchive)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return Meta{}, fmt.Errorf("not a gzipped chart archive (helm package makes one): %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return Meta{}, errors.New("the archive has no CHART/Chart.yaml")
		}
		if err != nil {
			return Meta{}, fmt.Errorf("read the archive: %w", err)
		}
		clean := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if dir, file := path.Split(clean); file != "Chart.yaml" || strings.Count(dir, "/") != 1 {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err != nil {
			return Meta{}, fmt.Errorf("read %s: %w", h.Name, err)
		}
		var m Meta
		if err := yaml.Unmarshal(b, &m); err != nil {
			return Meta{}, fmt.Errorf("%s: %w", h.Name, err)
		}
		switch {
		case m.Name == "":
			return Meta{}, fmt.Errorf("%s has no name", h.Name)
		case m.Version == "":
			return Meta{}, fmt.Errorf("%s has no version", h.Name)
		}
		return m, nil
	}
}

// Image is the chart archive data as Helm's OCI artifact, with its
// metadata.
func Image(data []byte) (ggcr.Image, Meta, error) {
	m, err := Read(data)
	if err != nil {
		return nil, m, err
	}
	cfg, err := json.Marshal(m)
	if err != nil {
		return nil, m, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: static.NewLayer(data, LayerMediaType)})
	if err != nil {
		return nil, m, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	return &rawConfig{Image: mutate.ConfigMediaType(img, ConfigMediaType), config: cfg}, m, nil
}

// rawConfig is an image whose config blob is given (Helm's metadata, not
// an image config): mutate only writes image configs.
type rawConfig struct {
	ggcr.Image
	config []byte
}

func (r *rawConfig) RawConfigFile() ([]byte, error) { return r.config, nil }

func (r *rawConfig) ConfigName() (ggcr.Hash, error) {
	h, _, err := ggcr.SHA256(bytes.NewReader(r.config))
	return h, err
}

func (r *rawConfig) Manifest() (*ggcr.Manifest, error) {
	m, err := r.Image.Manifest()
	if err != nil {
		return nil, err
	}
	m = m.DeepCopy()
	h, err := r.ConfigName()
	if err != nil {
		return nil, err
	}
	m.Config.Digest, m.Config.Size = h, int64(len(r.config))
	return m, nil
}

func (r *rawConfig) RawManifest() ([]byte, error) {
	m, err := r.Manifest()
	if err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

func (r *rawConfig) Digest() (ggcr.Hash, error) {
	b, err := r.RawManifest()
	if err != nil {
		return ggcr.Hash{}, err
	}
	h, _, err := ggcr.SHA256(bytes.NewReader(b))
	return h, err
}

func (r *rawConfig) Size() (int64, error) {
	b, err := r.RawManifest()
	return int64(len(b)), err
}
