package manifest_test

import (
	"testing"

	"kiln.dev/kiln/internal/manifest"
)

// A profile's manifests are a user's text: Parse answers objects that each
// have a kind and an API version, at most MaxObjects of them, or an error;
// it never panics.
func FuzzParse(f *testing.F) {
	f.Add("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: b\n")
	f.Add(`{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}`)
	f.Add("---\n---\nkind: [\n")
	f.Fuzz(func(t *testing.T, text string) {
		objs, err := manifest.Parse(text)
		if err != nil {
			return
		}
		if len(objs) > manifest.MaxObjects {
			t.Errorf("Parse answered %d objects, more than %d", len(objs), manifest.MaxObjects)
		}
		for _, o := range objs {
			if o.GetKind() == "" || o.GetAPIVersion() == "" {
				t.Errorf("Parse answered an object without a kind or an API version: %v", o.Object)
			}
		}
	})
}
