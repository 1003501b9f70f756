package kubeadm

import (
	"errors"
	"strings"
	"testing"
)

func TestUploadCertsPlan(t *testing.T) {
	key := strings.Repeat("0f", 32)
	good := UploadCerts{Node: "host-a", Address: "192.0.2.1", KubernetesVersion: "v1.35.4", CertificateKey: key}
	p, err := UploadCertsPlan(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.check(); err != nil {
		t.Fatalf("the plan is not one ParsePlan takes: %v", err)
	}
	if len(p.Files) != 1 || p.Files[0].Path != UploadCertsConfigPath || p.Files[0].Mode != 0o600 {
		t.Fatalf("files %+v, want %s alone, 0600", p.Files, UploadCertsConfigPath)
	}
	for _, want := range []string{`certificateKey: "` + key + `"`, `advertiseAddress: "192.0.2.1"`, `name: "host-a"`,
		`kubernetesVersion: "v1.35.4"`, "kind: InitConfiguration", "kind: ClusterConfiguration"} {
		if !strings.Contains(p.Files[0].Content, want) {
			t.Errorf("configuration lacks %q:\n%s", want, p.Files[0].Content)
		}
	}
	if len(p.Commands) != 1 || p.Commands[0].Step != StepUploadCerts {
		t.Fatalf("commands %+v, want one upload-certs command", p.Commands)
	}
	argv := strings.Join(p.Commands[0].Argv, " ")
	if strings.Contains(argv, key) {
		t.Errorf("the certificate key is on the command line: %s", argv)
	}
	if !strings.Contains(argv, "kubeadm init phase upload-certs --upload-certs --config") || !strings.Contains(argv, `rm -f "$1"`) {
		t.Errorf("command %s, want kubeadm's upload-certs phase and the configuration removed", argv)
	}

	for _, tt := range []struct {
		name, field string
		change      func(*UploadCerts)
	}{
		{"short key", "certificateKey", func(u *UploadCerts) { u.CertificateKey = "abc" }},
		{"upper-case key", "certificateKey", func(u *UploadCerts) { u.CertificateKey = strings.ToUpper(key) }},
		{"address", "address", func(u *UploadCerts) { u.Address = "host-a" }},
		{"node", "node", func(u *UploadCerts) { u.Node = "Host A\"" }},
		{"version", "kubernetesVersion", func(u *UploadCerts) { u.KubernetesVersion = "1.35" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := good
			tt.change(&u)
			_, err := UploadCertsPlan(u)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("UploadCertsPlan: %v, want a FieldError on %s", err, tt.field)
			}
		})
	}
}
