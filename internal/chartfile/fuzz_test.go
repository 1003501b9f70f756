package chartfile_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"testing"

	"kiln.dev/kiln/internal/chartfile"
)

// chartArchive is a gzipped tar of files (name to content).
func chartArchive(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A chart pushed to Kiln's registry is read by chartfile.Read: whatever
// the archive, it answers a chart's metadata, with a name and a version,
// or an error; it never panics.
func FuzzRead(f *testing.F) {
	f.Add(chartArchive(f, map[string]string{"demo/Chart.yaml": "apiVersion: v2\nname: demo\nversion: 0.1.0\n"}))
	f.Add(chartArchive(f, map[string]string{"./demo/Chart.yaml": "name: [\n", "demo/values.yaml": "a: 1\n"}))
	f.Add(chartArchive(f, map[string]string{"Chart.yaml": "name: top\nversion: 1\n"}))
	f.Add([]byte("not gzip"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := chartfile.Read(data)
		if err == nil && (m.Name == "" || m.Version == "") {
			t.Errorf("Read accepted a chart without a name or a version: %+v", m)
		}
	})
}
