package registry_test

import (
	"bytes"
	"errors"
	"testing"

	"kiln.dev/kiln/internal/chartfile"
	"kiln.dev/kiln/internal/chartfile/charttest"
	"kiln.dev/kiln/internal/registry"
)

// A chart pushed by a project member over the API (what kiln chart push
// sends) and one seeded as Kiln's are read back as the archives they were;
// the project's shadows Kiln's of the same name and version for that
// project only, and a chart neither has is ErrChartNotFound.
func TestCharts(t *testing.T) {
	e := newEnv(t, registry.Options{})
	shipped := charttest.Archive(t, "local-path", "0.0.30", map[string]string{"values.yaml": "a: 1\n"})
	own := charttest.Archive(t, "local-path", "0.0.30", map[string]string{"values.yaml": "a: 2\n"})

	s, err := e.reg.SeedChart(t.Context(), shipped)
	if err != nil {
		t.Fatal(err)
	}
	if s.Repository != "kiln.system/charts/local-path" || s.Tag != "0.0.30" || !s.Pushed {
		t.Errorf("seeded %+v", s)
	}
	if again, err := e.reg.SeedChart(t.Context(), shipped); err != nil || again.Pushed {
		t.Errorf("second seed: %+v, %v; want nothing written", again, err)
	}

	img, meta, err := chartfile.Image(own)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Name != "local-path" || meta.Version != "0.0.30" {
		t.Errorf("meta = %+v", meta)
	}
	e.mustPush("alice", "p/charts/local-path:0.0.30", img)

	for _, tc := range []struct {
		project string
		want    []byte
	}{{"p", own}, {"q", shipped}} {
		got, err := e.reg.Chart(t.Context(), tc.project, "local-path", "0.0.30")
		if err != nil {
			t.Fatalf("chart for %s: %v", tc.project, err)
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("project %s got another archive", tc.project)
		}
	}
	if _, err := e.reg.Chart(t.Context(), "p", "local-path", "9.9.9"); !errors.Is(err, registry.ErrChartNotFound) {
		t.Errorf("missing version: %v, want ErrChartNotFound", err)
	}
	if _, err := e.reg.Chart(t.Context(), "p", "nope", "1.0.0"); !errors.Is(err, registry.ErrChartNotFound) {
		t.Errorf("missing chart: %v, want ErrChartNotFound", err)
	}
}
