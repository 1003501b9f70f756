package install

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The Secret refresh-join-material applies is a bootstrap token as
// kubeadm token create makes one: named by its id, in kube-system, for
// authentication and signing, in kubeadm's group of joining nodes.
func TestBootstrapTokenSecret(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	o := BootstrapTokenSecret("abcdef.0123456789abcdef", "edge1", at)
	meta := o["metadata"].(map[string]any)
	if o["kind"] != "Secret" || o["type"] != "bootstrap.kubernetes.io/token" ||
		meta["name"] != "bootstrap-token-abcdef" || meta["namespace"] != "kube-system" {
		t.Fatalf("object %v", o)
	}
	got := map[string]string{}
	for k, v := range o["data"].(map[string]any) {
		b, err := base64.StdEncoding.DecodeString(v.(string))
		if err != nil {
			t.Fatalf("data %s: %v", k, err)
		}
		got[k] = string(b)
	}
	want := map[string]string{
		"token-id":                       "abcdef",
		"token-secret":                   "0123456789abcdef",
		"expiration":                     "2026-12-02T02:04:05Z",
		"usage-bootstrap-authentication": "true",
		"usage-bootstrap-signing":        "true",
		"auth-extra-groups":              "system:bootstrappers:kubeadm:default-node-token",
		"description":                    "Kiln: hosts added to cluster edge1 join with this token",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
}
