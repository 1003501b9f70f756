package kubeadm

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
)

// certificateExpiry finds the first certificate kubeadm made under root's
// PKIDir (etcd's included) to expire, CAs aside (Kiln tracks the cluster
// CA itself). ok is false when there is none: a worker.
func certificateExpiry(root string) (data distrokubeadm.InstallData, ok bool, err error) {
	dir := filepath.Join(root, distrokubeadm.PKIDir)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".crt") {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b, _ := pem.Decode(raw)
		if b == nil || b.Type != "CERTIFICATE" {
			return nil
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil || c.IsCA {
			return nil // not one of kubeadm's certificates
		}
		if !ok || c.NotAfter.Before(data.CertificatesNotAfter) {
			rel, _ := filepath.Rel(root, path)
			data, ok = distrokubeadm.InstallData{CertificatesNotAfter: c.NotAfter.UTC().Truncate(time.Second), Of: "/" + rel}, true
		}
		return nil
	})
	return data, ok, err
}
