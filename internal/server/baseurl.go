package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// ParseExternalURL checks an external URL (Options.ExternalURL, kilnd's
// --external-url): an absolute http or https URL with a host, maybe a path
// prefix, and no user, query or fragment. It returns it without a trailing
// slash, ready to have "/v1/..." appended.
func ParseExternalURL(s string) (string, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", err
	case u.Scheme != "http" && u.Scheme != "https":
		return "", errors.New("must be an absolute http:// or https:// URL")
	case u.Host == "" || u.Hostname() == "":
		return "", errors.New("must name a host")
	case u.User != nil:
		return "", errors.New("must not hold a user name or password")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", errors.New("must not have a query or a fragment")
	case u.Opaque != "":
		return "", errors.New("must be an absolute http:// or https:// URL")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u.String(), nil
}

// baseURL is the absolute URL the client reached this API at, which
// "/v1/..." paths are appended to: Options.ExternalURL when set; else the
// request's scheme (TLS or not) and Host, where with
// Options.TrustForwarded a proxy's X-Forwarded-Proto and X-Forwarded-Host
// take precedence (a malformed one is ignored). A request without a valid
// host (HTTP/1.0 may send none) gets "", and so bare paths.
func (s *Server) baseURL(r *http.Request) string {
	if s.externalURL != "" {
		return s.externalURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := r.Host
	if s.trustForwarded {
		if p := strings.ToLower(firstValue(r.Header.Get("X-Forwarded-Proto"))); p == "http" || p == "https" {
			scheme = p
		}
		if h := firstValue(r.Header.Get("X-Forwarded-Host")); validHost(h) {
			host = h
		}
	}
	if !validHost(host) {
		return ""
	}
	return scheme + "://" + host
}

// operationURL is the absolute URL of an operation, for the
// Azure-AsyncOperation and Location headers.
func (s *Server) operationURL(r *http.Request, id string) string {
	return s.baseURL(r) + operationPath(id)
}

// firstValue is the first of a header's comma-separated values: the one
// the proxy nearest the client set.
func firstValue(v string) string {
	v, _, _ = strings.Cut(v, ",")
	return strings.TrimSpace(v)
}

// validHost reports whether h is a host or host:port and nothing more, so
// that a header cannot smuggle a path, a user or another URL into the
// answer.
func validHost(h string) bool {
	if h == "" || strings.ContainsAny(h, "/\\?#@ \t\r\n") {
		return false
	}
	u, err := url.Parse("http://" + h)
	return err == nil && u.Host == h && u.Hostname() != ""
}

// mustExternalURL is ParseExternalURL for New, where a bad URL is a wiring
// mistake: kilnd checks the flag before.
func mustExternalURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := ParseExternalURL(s)
	if err != nil {
		panic(fmt.Sprintf("server.New: Options.ExternalURL %q: %v", s, err))
	}
	return u
}
