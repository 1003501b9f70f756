package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/reference"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"kiln.dev/kiln/internal/chartfile"
)

// Charts: Helm charts are kept as Helm pushes them to an OCI registry
// (package chartfile), chart NAME of project P in repository
// P/charts/NAME, tagged with its version. kiln chart push puts a project's
// there through the handler; the charts Kiln ships are seeded into
// System/charts/NAME by kilnd at start.

// ErrChartNotFound: neither the project nor the system namespace has the
// chart at that version.
var ErrChartNotFound = errors.New("chart not found")

// SeedChart puts the chart archive data into System/charts/NAME:VERSION
// (the name and version its Chart.yaml says), unless that tag already
// names it. It returns what it stored.
func (r *Registry) SeedChart(ctx context.Context, data []byte) (Seeded, error) {
	img, meta, err := chartfile.Image(data)
	if err != nil {
		return Seeded{}, err
	}
	dg, err := img.Digest()
	if err != nil {
		return Seeded{}, err
	}
	s := Seeded{Ref: meta.Name + ":" + meta.Version, Repository: System + "/" + chartfile.Repository(meta.Name),
		Tag: meta.Version, Digest: dg.String()}
	named, err := reference.WithName(s.Repository)
	if err != nil {
		return s, fmt.Errorf("chart %s: %w", s.Ref, err)
	}
	repo, err := r.ns.Repository(ctx, named)
	if err != nil {
		return s, fmt.Errorf("repository %s: %w", s.Repository, err)
	}
	if desc, err := repo.Tags(ctx).Get(ctx, s.Tag); err == nil && desc.Digest.String() == s.Digest {
		return s, nil
	}
	r.gcMu.RLock()
	defer r.gcMu.RUnlock()
	desc, err := seeder{repo: repo}.image(ctx, img)
	if err != nil {
		return s, fmt.Errorf("seed chart %s: %w", s.Ref, err)
	}
	if err := repo.Tags(ctx).Tag(ctx, s.Tag, desc); err != nil {
		return s, fmt.Errorf("tag %s:%s: %w", s.Repository, s.Tag, err)
	}
	s.Pushed = true
	return s, nil
}

// Chart returns the archive of chart name at version for project: the
// project's own, or else the one Kiln ships. The error wraps
// ErrChartNotFound when neither has it.
func (r *Registry) Chart(ctx context.Context, project, name, version string) ([]byte, error) {
	for _, ns := range []string{project, System} {
		data, err := r.chartIn(ctx, ns+"/"+chartfile.Repository(name), version)
		if errors.Is(err, ErrChartNotFound) {
			continue
		}
		return data, err
	}
	return nil, fmt.Errorf("%w: chart %s version %s is in neither project %s's charts nor Kiln's (kiln chart push puts it there)",
		ErrChartNotFound, name, version, project)
}

func (r *Registry) chartIn(ctx context.Context, repository, version string) ([]byte, error) {
	named, err := reference.WithName(repository)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrChartNotFound, err)
	}
	repo, err := r.ns.Repository(ctx, named)
	if err != nil {
		return nil, err
	}
	desc, err := repo.Tags(ctx).Get(ctx, version)
	if errors.As(err, new(distribution.ErrTagUnknown)) {
		return nil, ErrChartNotFound
	} else if err != nil {
		return nil, err
	}
	ms, err := repo.Manifests(ctx)
	if err != nil {
		return nil, err
	}
	m, err := ms.Get(ctx, desc.Digest)
	if err != nil {
		return nil, fmt.Errorf("%s:%s: %w", repository, version, err)
	}
	_, payload, err := m.Payload()
	if err != nil {
		return nil, err
	}
	var om ocispec.Manifest
	if err := json.Unmarshal(payload, &om); err != nil {
		return nil, fmt.Errorf("%s:%s: the manifest: %w", repository, version, err)
	}
	if om.Config.MediaType != chartfile.ConfigMediaType {
		return nil, fmt.Errorf("%s:%s is not a Helm chart (its config is %q)", repository, version, om.Config.MediaType)
	}
	for _, l := range om.Layers {
		if l.MediaType != chartfile.LayerMediaType {
			continue
		}
		if l.Size > chartfile.MaxArchive {
			return nil, fmt.Errorf("%s:%s: the chart is %d bytes; at most %d", repository, version, l.Size, chartfile.MaxArchive)
		}
		rc, err := repo.Blobs(ctx).Open(ctx, l.Digest)
		if err != nil {
			return nil, fmt.Errorf("%s:%s: the chart's layer: %w", repository, version, err)
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	return nil, fmt.Errorf("%s:%s has no layer of type %s", repository, version, chartfile.LayerMediaType)
}
