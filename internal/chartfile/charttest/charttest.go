// Package charttest makes small Helm chart archives for tests.
package charttest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"maps"
	"slices"
	"testing"
)

// Archive returns a chart archive (what helm package writes) of chart name
// at version: Chart.yaml, then files (path within the chart -> content),
// such as "templates/cm.yaml" or "values.yaml".
func Archive(t testing.TB, name, version string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	add := func(path, content string) {
		if err := tw.WriteHeader(&tar.Header{Name: name + "/" + path, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	add("Chart.yaml", "apiVersion: v2\nname: "+name+"\nversion: "+version+"\ndescription: a test chart\n")
	for _, p := range slices.Sorted(maps.Keys(files)) {
		add(p, files[p])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
