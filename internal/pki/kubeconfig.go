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
	return kubeconfig(server, caPEM, clusterName, user, func(w func(string, ...any)) {
		w("    client-certificate-data: %s\n", base64.StdEncoding.EncodeToString(certPEM))
		w("    client-key-data: %s\n", base64.StdEncoding.EncodeToString(keyPEM))
	})
}

// Exec is a kubeconfig user's exec credential plugin: a command kubectl
// runs for a credential (client.authentication.k8s.io/v1).
type Exec struct {
	Command string
	Args    []string
	// InstallHint is what kubectl prints when Command is not found.
	InstallHint string
}

// ExecKubeconfig renders a kubeconfig as Kubeconfig does whose user holds no
// credential but runs exec for one at each use; it holds no secret.
func ExecKubeconfig(server string, caPEM []byte, clusterName, user string, exec Exec) []byte {
	return kubeconfig(server, caPEM, clusterName, user, func(w func(string, ...any)) {
		w("    exec:\n")
		w("      apiVersion: client.authentication.k8s.io/v1\n")
		w("      command: %s\n", quote(exec.Command))
		w("      args:\n")
		for _, a := range exec.Args {
			w("      - %s\n", quote(a))
		}
		w("      interactiveMode: Never\n")
		w("      provideClusterInfo: false\n")
		if exec.InstallHint != "" {
			w("      installHint: %s\n", quote(exec.InstallHint))
		}
	})
}

// kubeconfig writes the file of Kubeconfig and ExecKubeconfig; user writes
// the fields of the user's credential.
func kubeconfig(server string, caPEM []byte, clusterName, user string, credential func(w func(string, ...any))) []byte {
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
	credential(w)
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
