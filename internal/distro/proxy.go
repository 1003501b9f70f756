package distro

import "strings"

// ProxyEnv is the HTTP proxy environment of a node's components: what
// spec.proxy asks for, with the destinations that must not go through the
// proxy added to NoProxy (NoProxyRequired).
type ProxyEnv struct {
	HTTP, HTTPS string
	NoProxy     []string
}

// Set reports whether a proxy is set (false for nil).
func (p *ProxyEnv) Set() bool { return p != nil && (p.HTTP != "" || p.HTTPS != "") }

// Env is NAME=value for each variable, upper case then lower case (tools
// read one or the other), in a fixed order; nil when no proxy is set.
func (p *ProxyEnv) Env() []string {
	if !p.Set() {
		return nil
	}
	var env []string
	add := func(name, value string) {
		if value != "" {
			env = append(env, name+"="+value, strings.ToLower(name)+"="+value)
		}
	}
	add("HTTP_PROXY", p.HTTP)
	add("HTTPS_PROXY", p.HTTPS)
	add("NO_PROXY", strings.Join(p.NoProxy, ","))
	return env
}

// NoProxyRequired are the destinations a node reaches directly whatever
// the proxy: itself, the API endpoint's host, the pod and service CIDRs and
// the cluster's service names.
func NoProxyRequired(nodeAddress, endpointHost, podCIDR, serviceCIDR string) []string {
	return []string{"localhost", "127.0.0.1", nodeAddress, endpointHost, podCIDR, serviceCIDR, ".svc", ".cluster.local"}
}

// MergeNoProxy is user's entries, then the required ones, without empty
// entries or duplicates (compared without case), in that order.
func MergeNoProxy(user, required []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range append(append([]string(nil), user...), required...) {
		e = strings.TrimSpace(e)
		if k := strings.ToLower(e); e != "" && !seen[k] {
			seen[k] = true
			out = append(out, e)
		}
	}
	return out
}
