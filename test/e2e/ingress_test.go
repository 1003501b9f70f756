package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/aws"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/sysimages"
	"kiln.dev/kiln/test/waitfor"
)

// The ingress pack as a profile names it (docs/profiles.md): Kiln's chart
// ingress, of Traefik's version, in namespace ingress; Order places it after
// the packs of TestProfilePacks that its checks index.
func ingressPack() v1.Pack {
	_, tag, _ := strings.Cut(sysimages.TraefikImage, ":")
	return v1.Pack{Name: "ingress", Version: strings.TrimPrefix(tag, "v"), Order: 15}
}

// ingressApps are two Deployments of the demo application, alpha and
// beta, each behind a Service of its name, and one Ingress that names no
// class (the ingress pack's traefik is the cluster's default) routing host
// a.example to alpha and b.example to beta.
const ingressApps = `apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: shop, namespace: shop}
spec:
  rules:
  - host: a.example
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: alpha, port: {number: 80}}}}]
  - host: b.example
    http:
      paths: [{path: /, pathType: Prefix, backend: {service: {name: beta, port: {number: 80}}}}]
`

const ingressApp = `---
apiVersion: apps/v1
kind: Deployment
metadata: {name: APP, namespace: shop}
spec:
  replicas: 1
  selector: {matchLabels: {app: APP}}
  template:
    metadata: {labels: {app: APP}}
    spec:
      containers:
      - name: demo
        image: ` + sysimages.DemoImage + `
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        readinessProbe:
          httpGet: {path: /healthz, port: 8080}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: APP, namespace: shop}
spec:
  selector: {app: APP}
  ports: [{port: 80, targetPort: 8080}]
`

// checkIngress (issue 46): on cluster ref, whose profile applied the
// ingress pack, Traefik's Service of type LoadBalancer has an address
// this machine reaches; with ingressApps applied, HTTP to that address
// with Host a.example answers from alpha's pods and with b.example from
// beta's, a host no Ingress names gets 404, and the Ingress's status holds
// the address (Traefik publishes its Service's).
func (e *env) checkIngress(ref string) {
	t := e.t
	t.Helper()
	begin := time.Now()
	pk := ingressPack()
	if out := e.mustKubectl(ref, "get", "ingressclass", "traefik", "-o",
		`jsonpath={.spec.controller} {.metadata.annotations.ingressclass\.kubernetes\.io/is-default-class}`); out != "traefik.io/ingress-controller true" {
		t.Errorf("IngressClass traefik: %q, want Traefik's controller and the default class", out)
	}
	ip := e.waitServiceAddressIn(ref, pk.TargetNamespace(), "ingress-traefik")
	manifest := ingressApps
	for _, app := range []string{"alpha", "beta"} {
		manifest += strings.ReplaceAll(ingressApp, "APP", app)
	}
	e.apply(ref, manifest)
	if out := e.mustKubectl(ref, "get", "ingress", "shop", "-n", "shop", "-o", "jsonpath={.spec.ingressClassName}"); out != "traefik" {
		t.Errorf("Ingress shop's class %q, want traefik (the default class, set when it was created)", out)
	}
	for _, app := range []string{"alpha", "beta"} {
		e.mustKubectl(ref, "wait", "--for=jsonpath={.status.availableReplicas}=1", "deployment/"+app, "-n", "shop", "--timeout=90s")
	}
	for host, app := range map[string]string{"a.example": "alpha", "b.example": "beta"} {
		waitfor.Cond(t, "http://"+ip+"/ with Host "+host+" answered by "+app, time.Minute, func() (bool, error) {
			code, body, err := httpGetHost("http://"+ip+"/", host)
			return err == nil && code == http.StatusOK && strings.HasPrefix(body, "hello from "+app+"-"),
				waitfor.NotYet(fmt.Errorf("%v: %d %q", err, code, body))
		})
	}
	// Both answered; a second round answers at once, each from its own.
	for host, app := range map[string]string{"a.example": "alpha", "b.example": "beta"} {
		if code, body, err := httpGetHost("http://"+ip+"/", host); err != nil || code != http.StatusOK || !strings.HasPrefix(body, "hello from "+app+"-") {
			t.Errorf("Host %s: %v: %d %q, want %s's answer", host, err, code, body, app)
		}
	}
	if code, body, err := httpGetHost("http://"+ip+"/", "c.example"); err != nil || code != http.StatusNotFound {
		t.Errorf("Host c.example, which no Ingress names: %v: %d %q, want 404", err, code, body)
	}
	waitfor.Cond(t, "Ingress shop's status to hold the load balancer's address "+ip, 30*time.Second, func() (bool, error) {
		out, err := e.kubectl(ref, "get", "ingress", "shop", "-n", "shop", "-o",
			"jsonpath={.status.loadBalancer.ingress[0].ip}{.status.loadBalancer.ingress[0].hostname}")
		return err == nil && strings.TrimSpace(out) == ip, waitfor.NotYet(fmt.Errorf("%v: %q", err, out))
	})
	t.Logf("ingress: Traefik at %s routes a.example and b.example to their Services, %s after the apps were applied",
		ip, time.Since(begin).Round(100*time.Millisecond))
}

// httpGetHost GETs url with Host host, and returns the status and the body.
func httpGetHost(url, host string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestIngressAWS (issue 46, "and on the local AWS"): a 1+1 cluster through
// the local AWS made from a profile naming the ingress pack passes
// checkIngress: Traefik's Service of type LoadBalancer is a network load
// balancer of the local AWS. It needs Services of type LoadBalancer on the
// aws provider (provider.ServiceLoadBalancers), which issue 46's AWS part
// builds; until the aws provider has them the test is skipped, saying so.
func TestIngressAWS(t *testing.T) {
	if _, ok := any(&aws.AWS{}).(provider.ServiceLoadBalancers); !ok {
		t.Skip("the aws provider gives Services of type LoadBalancer no address yet (issue 46's AWS load balancers, " +
			"provider.ServiceLoadBalancers): the ingress pack's Service would stay pending; SKIPPED")
	}
	t.Parallel()
	e, a := startAWS(t)
	if _, err := e.c.CreateCloudAccount(t.Context(), "default", a.account("acme", awsKey, awsSecret)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.PutProfile(t.Context(), "default", &v1.Profile{Name: "edge", Version: 1, KubernetesVersion: server.DefaultKubernetesVersion,
		Packs: []v1.Pack{ingressPack()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.PublishProfileVersion(t.Context(), "default", "edge", 1); err != nil {
		t.Fatal(err)
	}
	cl := awsCluster(t, "shop")
	cl.Spec.WorkerPools[0].Size = 1
	cl.Spec.KubernetesVersion = "" // the profile's
	cl.Spec.Profile = v1.ProfileRef{Name: "edge", Version: 1}
	op := e.create(cl)
	t.Logf("cluster shop (aws, 1+1) with the ingress pack Succeeded in %s", op.EndTime.Sub(op.StartTime).Round(time.Second))
	e.checkIngress("shop")
}
