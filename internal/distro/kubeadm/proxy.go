package kubeadm

import (
	"crypto/x509"
	"encoding/pem"
	"net/url"
	"strings"

	"kiln.dev/kiln/internal/distro"
)

func (s *spec) checkProxy() error {
	p := s.Proxy
	if p == nil {
		return nil
	}
	for _, f := range []struct {
		field, value string
		to           *string
	}{
		{"proxy.httpProxy", p.HTTPProxy, &s.proxy.HTTP},
		{"proxy.httpsProxy", p.HTTPSProxy, &s.proxy.HTTPS},
	} {
		if f.value == "" {
			continue
		}
		u, err := url.Parse(f.value)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || unsafeValue(f.value) {
			return refuse(f.field, "%q must be an http:// or https:// URL with a host and no spaces, double quotes or backslashes, for example http://proxy.example.com:3128", f.value)
		}
		*f.to = f.value
	}
	if s.proxy.Set() {
		entries, err := noProxy(p.NoProxy, s.requiredNoProxy())
		if err != nil {
			return err
		}
		s.proxy.NoProxy = entries
	}
	if p.RootCA != "" {
		ca, err := normalizeRootCA(p.RootCA)
		if err != nil {
			return err
		}
		s.rootCA = ca
	}
	return nil
}

// requiredNoProxy are the destinations that must not go through the proxy:
// the node itself, the API endpoint, the pods and services, and the cluster's
// service names.
func (s *spec) requiredNoProxy() []string {
	return distro.NoProxyRequired(s.address.String(), s.endpointHost, s.pod.String(), s.service.String())
}

// noProxy is the user's comma-separated list, then the required entries,
// without duplicates (compared without case), in that order.
func noProxy(user string, required []string) ([]string, error) {
	var entries []string
	for i, e := range strings.Split(user, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if unsafeValue(e) {
			return nil, refuse("proxy.noProxy", "entry %d %q must be a host name, a domain (.example.com), an IP address, a CIDR or *", i+1, e)
		}
		entries = append(entries, e)
	}
	return distro.MergeNoProxy(entries, required), nil
}

// unsafeValue reports whether s has a character that a quoted value in a
// systemd unit or an apt configuration cannot hold: a space or another
// control character, a double quote, a backslash, or a non-ASCII character.
func unsafeValue(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool {
		return r <= ' ' || r == 0x7f || r == '"' || r == '\\' || r > 0x7e
	})
}

// normalizeRootCA checks a PEM bundle of certificates and re-encodes it.
func normalizeRootCA(s string) (string, error) {
	var b strings.Builder
	rest := []byte(s)
	for n := 1; ; n++ {
		block, r := pem.Decode(rest)
		if block == nil {
			break
		}
		rest = r
		if block.Type != "CERTIFICATE" {
			return "", refuse("proxy.rootCA", "must hold PEM certificates only, not a %q block", block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return "", refuse("proxy.rootCA", "certificate %d does not parse: %v", n, err)
		}
		b.Write(pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: block.Bytes}))
	}
	switch {
	case b.Len() == 0:
		return "", refuse("proxy.rootCA", "must be a PEM certificate (-----BEGIN CERTIFICATE-----)")
	case strings.TrimSpace(string(rest)) != "":
		return "", refuse("proxy.rootCA", "has data after its last PEM certificate")
	}
	return b.String(), nil
}
