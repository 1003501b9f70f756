package pki

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// Kubeconfig renders a kubeconfig (YAML) with one cluster, one user and one
// context named USER@CLUSTERNAME, which is the current context. The
// certificates and key are embedded (the *-data fields), so the file stands
// alone. kubectl, client-go and every Kubernetes component accept it.
func Kubeconfig(server string, caPEM, certPEM, keyPEM []byte, clusterName, user string) []byte {
	ctx := user + "@" + clusterName
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("apiVersion: v1\n")
	w("kind: Config\n")
	w("clusters:\n")
	w("- name: %s\n", quote(clusterName))
	w("  cluster:\n")
	w("    server: %s\n", quote(server))
	w("    certificate-authority-data: %s\n", base64.StdEncoding.EncodeToString(caPEM))
	w("users:\n")
	w("- name: %s\n", quote(user))
	w("  user:\n")
	w("    client-certificate-data: %s\n", base64.StdEncoding.EncodeToString(certPEM))
	w("    client-key-data: %s\n", base64.StdEncoding.EncodeToString(keyPEM))
	w("contexts:\n")
	w("- name: %s\n", quote(ctx))
	w("  context:\n")
	w("    cluster: %s\n", quote(clusterName))
	w("    user: %s\n", quote(user))
	w("current-context: %s\n", quote(ctx))
	w("preferences: {}\n")
	return b.Bytes()
}

// quote returns s as a double-quoted scalar: a JSON string is a valid YAML
// double-quoted string, whatever s holds (colons, '#', leading spaces).
func quote(s string) string {
	out, err := json.Marshal(s)
	if err != nil {
		// json.Marshal of a string does not fail: invalid UTF-8 is
		// replaced, everything else is escaped.
		panic(fmt.Sprintf("pki: quote %q: %v", s, err))
	}
	return string(out)
}
