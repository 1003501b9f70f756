// Package manifest reads the Kubernetes objects of a manifests pack: YAML
// documents separated by "---", each an object with apiVersion, kind and
// metadata.name. Both validation and the applier read them here, so a
// profile that validates applies the objects it was checked with.
package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// MaxObjects bounds the objects of one pack.
const MaxObjects = 500

// Parse returns the objects of text in order, skipping empty documents. An
// error names the document (1-based) at fault and what is wrong with it.
func Parse(text string) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(text)), 4096)
	var objs []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d is not YAML: %w", doc, err)
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		switch {
		case o.GetAPIVersion() == "":
			return nil, fmt.Errorf("document %d has no apiVersion", doc)
		case o.GetKind() == "":
			return nil, fmt.Errorf("document %d has no kind", doc)
		case o.GetName() == "":
			return nil, fmt.Errorf("document %d (%s) has no metadata.name", doc, o.GetKind())
		}
		if objs = append(objs, o); len(objs) > MaxObjects {
			return nil, fmt.Errorf("more than %d objects; split the pack", MaxObjects)
		}
	}
}

// Describe names an object as people read it: "Deployment web/frontend"
// (namespace/name; the name alone when cluster-scoped).
func Describe(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return o.GetKind() + " " + ns + "/" + o.GetName()
	}
	return o.GetKind() + " " + o.GetName()
}
