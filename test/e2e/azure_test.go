package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v7"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/azure"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
	"kiln.dev/kiln/test/cloud/machines"
	"kiln.dev/kiln/test/waitfor"
)

// The local Azure's application in these tests.
const (
	azureClient = "00000000-0000-4000-8000-0000000e2e01"
	azureSecret = "kiln-e2e-azure-secret"
)

// localAzure is bin/kiln-azure-local run for a test, its virtual machines
// containers of the node image.
type localAzure struct {
	url, state, log, ca string
}

// account is a cloud account of provider azure reaching the local Azure.
func (a *localAzure) account(t testing.TB, name string) *v1.CloudAccount {
	t.Helper()
	ca, err := os.ReadFile(a.ca)
	if err != nil {
		t.Fatal(err)
	}
	return &v1.CloudAccount{Name: name, Provider: azure.Name, Credentials: map[string]string{
		v1.AzureTenant: azurelocal.DefaultTenant, v1.AzureSubscription: azurelocal.DefaultSubscription,
		v1.AzureClientID: azureClient, v1.AzureClientSecret: azureSecret, v1.AzureRegion: "eastus",
		v1.AzureEndpoint: a.url, v1.AzureAuthorityHost: a.url, v1.AzureCABundle: string(ca)}}
}

func startLocalAzure(t testing.TB) *localAzure {
	t.Helper()
	dir := t.TempDir()
	a := &localAzure{state: filepath.Join(dir, "azure.json"), log: filepath.Join(dir, "azure.log"), ca: filepath.Join(dir, "ca.pem")}
	port := strconv.Itoa(freePort(t))
	addr := net.JoinHostPort("127.0.0.1", port)
	a.url = "https://" + addr
	logf, err := os.Create(a.log)
	if err != nil {
		t.Fatal(err)
	}
	// --host-addresses: the load balancers' frontends are addresses of
	// this host (lo), which forward.
	cmd := exec.Command(filepath.Join(binDir, "kiln-azure-local"), "--listen", addr, "--state", a.state, "--ca-out", a.ca,
		"--client", azureClient+":"+azureSecret, "--host-addresses")
	cmd.Stdout, cmd.Stderr = logf, logf
	identity := "label=" + azurelocal.LabelIdentity + "=" + machines.StateIdentity(a.state)
	own(identity)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(a.log)
			t.Logf("kiln-azure-local log:\n%s", tail(string(b), 60))
		}
		removeSelected(identity)
	})
	waitfor.Cond(t, "kiln-azure-local to listen on "+addr, 30*time.Second, func() (bool, error) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		_, serr := os.Stat(a.ca)
		return err == nil && serr == nil, waitfor.NotYet(err)
	})
	return a
}

// A 1+2 cluster through the local Azure (issue 49): the control plane a
// virtual machine behind the API's load balancer (its endpoint a public
// IP), the workers a pool's scale set whose machines join as their
// computer names; three Ready nodes, an app that serves, a Service of type
// LoadBalancer that answers on its public IP from this machine, and a
// delete that leaves no machine and no address of a load balancer on this
// host.
func TestAzureCluster(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the local Azure's load balancers put their frontends on lo")
	}
	if _, err := os.Stat(filepath.Join(systemImages, "coredns.tar")); err != nil {
		t.Skipf("no system images in %s (make system-images): azure clusters SKIPPED", systemImages)
	}
	if out, err := exec.Command("docker", "images", "-q", "kiln/node").Output(); err != nil || len(strings.TrimSpace(string(out))) == 0 {
		t.Skipf("no node image on the Docker engine (make node-image): azure clusters SKIPPED (%v)", err)
	}
	host := dockerBridge(t)
	port := strconv.Itoa(freePort(t))
	a := startLocalAzure(t)
	e := start(t, "kilnd", "--system-images", systemImages, "--azure",
		"--agent-listen", net.JoinHostPort(host, port), "--agent-advertise", net.JoinHostPort(host, port))
	ctx := t.Context()
	if _, err := e.c.CreateCloudAccount(ctx, "default", a.account(t, "contoso")); err != nil {
		t.Fatal(err)
	}
	archive := helloImage(t)
	e.kiln("image", "push", archive, "hello:1")

	cl := localCluster("az", 1, true, 2)
	cl.Spec.Provider, cl.Spec.CloudAccount, cl.Spec.Region = azure.Name, "contoso", "eastus"
	cl.Spec.Network.NodeCIDR = vpcRange(t).String()
	op := e.create(cl)
	t.Logf("cluster az (azure, 1+2) Succeeded in %s", op.EndTime.Sub(op.StartTime).Round(time.Second))
	got, err := e.c.GetCluster(ctx, "default", "az")
	if err != nil {
		t.Fatal(err)
	}
	endpoint, err := netip.ParseAddrPort(got.Status.Endpoint)
	if err != nil || endpoint.Port() != 6443 || netip.MustParsePrefix(cl.Spec.Network.NodeCIDR).Contains(endpoint.Addr()) {
		t.Errorf("the cluster's endpoint %q: want the API load balancer's public IP and port 6443, not a machine's address", got.Status.Endpoint)
	}

	workers := e.readyWorkers("az", 3, 2)
	for _, w := range workers {
		if !strings.HasPrefix(w, "default-") {
			t.Errorf("worker node %s is not named as a machine of the default pool's scale set (default-XXXXXX)", w)
		}
	}
	checkIdentityToken(t, a)
	ip := strings.TrimSpace(e.mustKubectl("az", "get", "node", workers[0], "-o", "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}"))
	e.checkHello("az", workers, ip)
	// A Service of type LoadBalancer is a frontend of the cluster's load
	// balancer of Services on a public IP of its own, reached from this
	// machine (issue 46); hello-kept is left to the cluster's delete.
	kept := e.checkLoadBalancer("default", "az", func() string { return a.serviceFrontends(t, "default", "az") })

	delID, err := e.c.DeleteCluster(ctx, "default", "az")
	if err != nil {
		t.Fatal(err)
	}
	e.wait("az", delID)
	if out := docker(t, "ps", "-aq", "--filter", "label="+azurelocal.LabelIdentity+"="+machines.StateIdentity(a.state)); out != "" {
		t.Errorf("after the delete, machines of the local Azure remain: %s", out)
	}
	waitfor.Cond(t, "the load balancers' addresses to leave lo", 15*time.Second, func() (bool, error) {
		out, err := exec.Command("ip", "-o", "addr", "show", "dev", "lo").Output()
		return err == nil && !strings.Contains(string(out), endpoint.Addr().String()+"/32") && !strings.Contains(string(out), kept+"/32"), nil
	})
}

// serviceFrontends lists the frontends of cluster project/name's load
// balancer of Services in the local Azure, a line each ("" for none), as
// ARM answers them to the SDK.
func (a *localAzure) serviceFrontends(t testing.TB, project, name string) string {
	t.Helper()
	acct := a.account(t, "e2e")
	cr := acct.Credentials
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(cr[v1.AzureCABundle]))
	opts := azcore.ClientOptions{Cloud: azure.Cloud(cr),
		Transport: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
	cred, err := azidentity.NewClientSecretCredential(cr[v1.AzureTenant], azureClient, azureSecret,
		&azidentity.ClientSecretCredentialOptions{ClientOptions: opts, DisableInstanceDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	lbs, err := armnetwork.NewLoadBalancersClient(cr[v1.AzureSubscription], cred, &arm.ClientOptions{ClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := lbs.Get(t.Context(), azure.GroupName(project, name), "kubernetes", nil)
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range lb.Properties.FrontendIPConfigurations {
		out = append(out, *f.Name)
	}
	return strings.Join(out, "\n")
}

// checkIdentityToken asks the instance metadata service, from inside one
// of the local Azure's virtual machines (a node-image container, where
// its environment says the endpoint: AZURE_POD_IDENTITY_AUTHORITY_HOST),
// for a token of the machine's managed identity (the cluster's), as
// kiln-agent does for a staging blob: bash's /dev/tcp, since the node
// image has no HTTP client.
func checkIdentityToken(t *testing.T, a *localAzure) {
	t.Helper()
	ids := strings.Fields(docker(t, "ps", "-q", "--filter", "label="+azurelocal.LabelIdentity+"="+machines.StateIdentity(a.state)))
	if len(ids) == 0 {
		t.Fatal("no machine of the local Azure runs")
	}
	script := `h=${AZURE_POD_IDENTITY_AUTHORITY_HOST#http://}; exec 3<>/dev/tcp/${h%:*}/${h#*:}; ` +
		`printf 'GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource=https://storage.azure.com/ HTTP/1.0\r\nMetadata: true\r\n\r\n' >&3; cat <&3`
	out := docker(t, "exec", ids[0], "bash", "-c", script)
	if !strings.Contains(out, " 200 OK") || !strings.Contains(out, `"token_type":"Bearer"`) || !strings.Contains(out, `"access_token":"`) {
		t.Errorf("the instance metadata service, asked from machine %s for its identity's token, answered:\n%s", ids[0], tail(out, 20))
	}
}
