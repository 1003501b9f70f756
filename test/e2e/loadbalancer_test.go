package e2e

import (
	"fmt"
	"strings"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// checkLoadBalancer exposes cluster's hello Deployment (checkHello's) as a
// Service of type LoadBalancer, as an app team reaches its app from outside
// (issue 46): the Service gets an address in status.loadBalancer.ingress
// within 15 s and answers there from this machine; a change of its port
// moves the load balancer to the new port; deleting the Service deletes
// its load balancer. lbs lists the cluster's load balancers as the
// provider has them, a line each ("" for none): on docker their
// containers, on edge hosts the addresses Services hold. A second Service,
// hello-kept, is left for the cluster's delete to remove; its address is
// returned.
func (e *env) checkLoadBalancer(project, cluster string, lbs func() string) (kept string) {
	t := e.t
	t.Helper()
	ref := cluster
	if project != "default" {
		ref = project + "/" + cluster
	}
	begin := time.Now()
	e.mustKubectl(ref, "expose", "deployment", "hello", "--name", "hello-lb", "--type", "LoadBalancer", "--port", "80", "--target-port", "8080")
	ip := e.waitServiceAddress(ref, "hello-lb")
	got := time.Since(begin)
	// Issue 46's 15 s are the cluster's, from the Service's creation to the
	// address the service controller gave it (its EnsuredLoadBalancer
	// event; MetalLB's IPAllocated), both stamped by the servers: what the test sees adds kubectl's
	// own start and its polls, seconds each on a loaded machine.
	took, events := e.serviceAddressTook(ref, "hello-lb")
	t.Logf("Service hello-lb: its address %s after its creation by the servers' stamps (%s)", took, events)
	if took > 15*time.Second {
		t.Errorf("Service hello-lb got its address %s %s after its creation (the test saw it after %s), over issue 46's 15 s",
			ip, took, got.Round(100*time.Millisecond))
	}
	answers := func(port string) {
		t.Helper()
		waitfor.Cond(t, "the load balancer at "+ip+":"+port, 30*time.Second, func() (bool, error) {
			body, err := httpGet("http://" + ip + ":" + port + "/")
			return err == nil && strings.Contains(body, "hello from hello-"), waitfor.NotYet(fmt.Errorf("%v: %q", err, body))
		})
	}
	answers("80")
	t.Logf("Service hello-lb of type LoadBalancer: address %s in %s, answering %s after the create",
		ip, got.Round(100*time.Millisecond), time.Since(begin).Round(100*time.Millisecond))
	if l := lbs(); len(strings.Split(l, "\n")) != 1 {
		t.Errorf("load balancers for one Service:\n%s", l)
	}

	// Its port changes: the load balancer follows.
	e.mustKubectl(ref, "patch", "service", "hello-lb", "--type", "json", "-p",
		`[{"op":"replace","path":"/spec/ports/0/port","value":8081}]`)
	answers("8081")
	if _, err := httpGet("http://" + ip + ":80/"); err == nil {
		t.Errorf("the load balancer still answers on port 80 after the Service moved to 8081")
	}

	// Deleted with its Service.
	e.mustKubectl(ref, "delete", "service", "hello-lb", "--wait=true", "--timeout=60s")
	waitfor.Cond(t, "the load balancer of hello-lb gone", time.Minute, func() (bool, error) {
		left := lbs()
		return left == "", waitfor.NotYet(fmt.Errorf("left: %q", left))
	})

	// One more, left to the cluster's delete.
	e.mustKubectl(ref, "expose", "deployment", "hello", "--name", "hello-kept", "--type", "LoadBalancer", "--port", "80", "--target-port", "8080")
	return e.waitServiceAddress(ref, "hello-kept")
}

// waitServiceAddress waits, up to a minute, for Service name of cluster
// ref (namespace default) to have an address in status.loadBalancer.ingress,
// and returns it; while it waits, the Service's events say why not.
func (e *env) waitServiceAddress(ref, name string) string {
	e.t.Helper()
	return e.waitServiceAddressIn(ref, "default", name)
}

// waitServiceAddressIn is waitServiceAddress for a Service of namespace.
// The address is the first ingress's ip, or its hostname when it has none
// (a cloud's load balancer may have a name).
func (e *env) waitServiceAddressIn(ref, namespace, name string) string {
	e.t.Helper()
	var ip string
	waitfor.Cond(e.t, "an address for Service "+namespace+"/"+name, time.Minute, func() (bool, error) {
		out, err := e.kubectl(ref, "get", "service", name, "-n", namespace, "-o",
			"jsonpath={.status.loadBalancer.ingress[0].ip}{.status.loadBalancer.ingress[0].hostname}")
		ip = strings.TrimSpace(out)
		if err != nil || ip == "" {
			evs, _ := e.kubectl(ref, "get", "events", "-n", namespace, "--field-selector", "involvedObject.name="+name, "-o", "jsonpath={.items[*].message}")
			return false, waitfor.NotYet(fmt.Errorf("%v: ingress %q; events: %s", err, ip, evs))
		}
		return true, nil
	})
	return ip
}

// serviceAddressTook is how long Service name of cluster ref (namespace
// default) waited for its load balancer: from its creationTimestamp to the
// first EnsuredLoadBalancer event of Kubernetes' service controller
// (Kiln's, for docker, aws and azure clusters) or IPAllocated event of
// MetalLB's (edge clusters), both to the second (an event's firstTimestamp,
// or its eventTime when it was recorded through events.k8s.io). It also
// returns the Service's events with their times, for the log.
func (e *env) serviceAddressTook(ref, name string) (time.Duration, string) {
	e.t.Helper()
	created, err := e.kubectl(ref, "get", "service", name, "-o", "jsonpath={.metadata.creationTimestamp}")
	if err != nil {
		e.t.Fatalf("Service %s's creation time: %v", name, err)
	}
	from, err := time.Parse(time.RFC3339, strings.TrimSpace(created))
	if err != nil {
		e.t.Fatalf("Service %s: creationTimestamp %q: %v", name, created, err)
	}
	var ensured time.Time
	var seen []string
	waitfor.Cond(e.t, "the EnsuredLoadBalancer or IPAllocated event of Service "+name, time.Minute, func() (bool, error) {
		out, err := e.kubectl(ref, "get", "events", "--field-selector", "involvedObject.name="+name,
			"-o", `jsonpath={range .items[*]}{.reason} {.firstTimestamp} {.eventTime}{"\n"}{end}`)
		seen = seen[:0]
		for line := range strings.Lines(out) {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			at, err := time.Parse(time.RFC3339, f[1])
			if err != nil && len(f) > 2 {
				at, err = time.Parse(time.RFC3339, f[2])
			}
			if err != nil {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s +%s", f[0], at.Sub(from)))
			if (f[0] == "EnsuredLoadBalancer" || f[0] == "IPAllocated") && (ensured.IsZero() || at.Before(ensured)) {
				ensured = at
			}
		}
		return err == nil && !ensured.IsZero(), waitfor.NotYet(fmt.Errorf("%v: %q", err, out))
	})
	return ensured.Sub(from), strings.Join(seen, ", ")
}

// dockerLoadBalancers lists the cluster's Service load balancer
// containers, a line each ("" for none).
func (e *env) dockerLoadBalancers(project, cluster string) string {
	return docker(e.t, append(append([]string{"ps", "-a"}, e.dockerFilter(project, cluster)...),
		"--filter", "label=kiln.dev/service-lb", "--format", "{{.Names}} {{.Status}}")...)
}

// checkPolicyNotEnforced applies a default-deny NetworkPolicy to a cluster
// on the bridge pod network, which enforces none: the cluster says so
// (NetworkPolicyNotEnforced True, naming it, and a Warning event), and
// says False once it is deleted.
func (e *env) checkPolicyNotEnforced(cluster string) {
	t := e.t
	t.Helper()
	e.apply(cluster, `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: default-deny, namespace: default}
spec: {podSelector: {}, policyTypes: [Ingress]}
`)
	wait := func(status, says string) {
		t.Helper()
		waitfor.Cond(t, "NetworkPolicyNotEnforced "+status+" on "+cluster, time.Minute, func() (bool, error) {
			for _, c := range e.cluster(cluster).Status.Conditions {
				if c.Type == v1.ConditionNetworkPolicyNotEnforced {
					return c.Status == status && strings.Contains(c.Message, says), waitfor.NotYet(fmt.Errorf("%s: %s", c.Status, c.Message))
				}
			}
			return false, waitfor.NotYet(fmt.Errorf("no condition"))
		})
	}
	wait("True", "default/default-deny")
	e.mustKubectl(cluster, "delete", "networkpolicy", "default-deny")
	wait("False", "holds no NetworkPolicy")
}
