package main

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/facts"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/gateway/gatewaytest"
	"kiln.dev/kiln/test/testlog"
	"kiln.dev/kiln/test/waitfor"
)

// One command line starts a node: run joins first, then holds the session;
// the placeholder executor fails instructions, saying why.
func TestRunJoinsFirst(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	startRun(t, e, c, "c-w-0")
	res := instruct(t, e, c, "c-w-0", "i-1", v1.InstructionInstall)
	if res.State != v1.StepFailed || !strings.Contains(res.Message, "no distribution installed on this agent") {
		t.Errorf("result %+v", res)
	}

	// Without an identity and without credentials: a usage error.
	code, _, errOut := runAgent(t, "run", "--data-dir", t.TempDir())
	if code != exitUsage || !strings.Contains(errOut, "no node identity") {
		t.Errorf("run without identity: exit %d, %q", code, errOut)
	}
}

// A local machine's agent (the flags kilnd's local provider passes) reports
// what the node is: its machine's name, its one loopback address, this
// host's OS; the prechecks of the host's files are not applicable, and none
// warns.
func TestRunAsLocalMachine(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	startRun(t, e, c, "c-w-0", "--hostname", "c-w-0", "--private-root", "--bind-address", "127.0.0.9")
	// A result comes over the session, after the facts and prechecks it
	// sends first: the record holds the session's, not only the join's.
	instruct(t, e, c, "c-w-0", "i-1", v1.InstructionInstall)
	n, err := e.Store.GetNode(context.Background(), c.Key, "c-w-0")
	if err != nil {
		t.Fatal(err)
	}
	if f := n.Facts; f == nil || f.Hostname != "c-w-0" || len(f.Interfaces) != 1 ||
		!slices.Equal(f.Interfaces[0].Addresses, []string{"127.0.0.9/8"}) {
		t.Errorf("facts %+v, want hostname c-w-0 and only 127.0.0.9/8", n.Facts)
	}
	if n.Address != "127.0.0.9" {
		t.Errorf("address %q, want 127.0.0.9", n.Address)
	}
	if host := facts.Gather(facts.Options{}).OS; n.Facts != nil && n.Facts.OS != host {
		t.Errorf("OS %q, want this host's %q (the fixture root's is ubuntu 24.04)", n.Facts.OS, host)
	}
	na := 0
	for _, r := range n.Prechecks {
		switch r.Result {
		case v1.PrecheckWarn, v1.PrecheckFail:
			t.Errorf("precheck %s: %s: %s", r.Name, r.Result, r.Message)
		case v1.PrecheckNotApplicable:
			na++
		}
	}
	if na != 9 {
		t.Errorf("%d checks not applicable, want 9 (os, dns-port, resolv-conf, swap, kernel-network, cgroup-driver, "+
			"container-runtime, disk-space, ntp): %+v", na, n.Prechecks)
	}
}

// --distribution kubeadm runs install instructions with the kubeadm
// executor: params that are not a kubeadm plan are refused before anything
// runs on this host.
func TestRunDistributionKubeadm(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "auto"})
	startRun(t, e, c, "c-w-0", "--distribution", "kubeadm")
	res := instruct(t, e, c, "c-w-0", "i-1", v1.InstructionInstall)
	// An instruction's result has no code field: the code travels in its
	// message.
	if res.State != v1.StepFailed || res.Retryable || !strings.Contains(res.Message, "InvalidParameter") ||
		!strings.Contains(res.Message, "invalid kubeadm plan") {
		t.Errorf("result %+v", res)
	}
}

// Wrong combinations of --distribution are refused before anything else.
func TestRunDistributionRefused(t *testing.T) {
	tests := []struct {
		name string
		args []string
		euid int
		code int
		says string
	}{
		{"local without kiln-kube", []string{"--distribution", "local"}, 0, exitUsage, "--distribution local needs --kube-binary"},
		{"kubeadm with kiln-kube", []string{"--distribution", "kubeadm", "--kube-binary", "/x/kiln-kube"}, 0, exitUsage,
			"--kube-binary is the local distribution's"},
		{"unknown", []string{"--distribution", "rke2"}, 0, exitUsage, `--distribution "rke2": want local, kiln or kubeadm`},
		{"kubeadm not as root", []string{"--distribution", "kubeadm"}, 1000, exitError, "run kiln-agent as root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			euid := geteuid
			geteuid = func() int { return tt.euid }
			t.Cleanup(func() { geteuid = euid })
			code, _, errOut := runAgent(t, append([]string{"run", "--data-dir", t.TempDir()}, tt.args...)...)
			if code != tt.code || !strings.Contains(errOut, tt.says) {
				t.Errorf("exit %d, %q; want %d, %q", code, errOut, tt.code, tt.says)
			}
		})
	}
	// Not root, but files under a --root of their own: a test's setup.
	euid := geteuid
	geteuid = func() int { return 1000 }
	t.Cleanup(func() { geteuid = euid })
	if dist, err := chooseDistribution("kubeadm", "", t.TempDir()); err != nil || dist != v1.DistroKubeadm {
		t.Errorf("kubeadm under a test root: %q, %v", dist, err)
	}
	if dist, err := chooseDistribution("", "/x/kiln-kube", "/"); err != nil || dist != v1.DistroLocal {
		t.Errorf("--kube-binary alone: %q, %v; want the local distribution", dist, err)
	}
}

// startRun runs `kiln-agent run` for node of c, joining first, with extra
// flags and a fixture root, until the test ends.
func startRun(t *testing.T, e *gatewaytest.Env, c *gatewaytest.Cluster, node string, extra ...string) {
	t.Helper()
	creds, pass := c.WriteCredentials(t, t.TempDir())
	args := append([]string{"run", "--data-dir", t.TempDir(), "--credentials", creds, "--passphrase", pass,
		"--node-name", node, "--root", fixture(t, "nameserver 127.0.0.53\n")}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr testlog.Buffer
	go func() { done <- run(ctx, args, &testlog.Buffer{}, &stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("run exited %d:\n%s", code, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not stop")
		}
	})
	waitfor.Cond(t, "the node record", 30*time.Second, func() (bool, error) {
		_, err := e.Store.GetNode(context.Background(), c.Key, node)
		return err == nil, nil
	})
}

// instruct issues an instruction of kind to node and returns its result.
func instruct(t *testing.T, e *gatewaytest.Env, c *gatewaytest.Cluster, node, id, kind string) *v1.InstructionResult {
	t.Helper()
	e.Issue(c, node, id, kind)
	var res *v1.InstructionResult
	waitfor.Cond(t, "the result of "+id, 30*time.Second, func() (bool, error) {
		in, err := e.Store.GetInstruction(context.Background(), id)
		if err == nil {
			res = in.Result
		}
		return res != nil, nil
	})
	return res
}

// --clock-offset skews the agent's clock, which the time-skew precheck
// compares with the controller's: the node registers PRECHECK_FAILED with
// that check's message. The flag is a test hook, hidden from --help.
func TestRunClockOffset(t *testing.T) {
	e := gatewaytest.New(t, gateway.Options{})
	c := e.CreateCluster("c", v1.ClusterSpec{NodeApproval: "manual"})
	startRun(t, e, c, "c-w-0", "--hostname", "c-w-0", "--private-root", "--bind-address", "127.0.0.9", "--clock-offset", "-90s")
	var state, message string
	var results []v1.PrecheckResult
	waitfor.Cond(t, "the node's prechecks", 30*time.Second, func() (bool, error) {
		n, err := e.Store.GetNode(context.Background(), c.Key, "c-w-0")
		if err == nil {
			state, message, results = n.State, n.Message, n.Prechecks
		}
		return len(results) > 0, err
	})
	if state != v1.NodePrecheckFailed || message != "prechecks failed: time-skew" {
		t.Errorf("node %s %q, want PRECHECK_FAILED for time-skew", state, message)
	}
	i := slices.IndexFunc(results, func(r v1.PrecheckResult) bool { return r.Name == "time-skew" })
	if i < 0 || results[i].Result != v1.PrecheckFail ||
		!regexp.MustCompile(`differs from the controller's by 1m(29|30)[.0-9]*s, more than 2s`).MatchString(results[i].Message) {
		t.Errorf("time-skew: %+v, want a failure of about 90s", results)
	}

	for _, cmd := range []string{"run", "join"} {
		_, out, _ := runAgent(t, cmd, "--help")
		if strings.Contains(out, "clock-offset") || !strings.Contains(out, "--private-root") {
			t.Errorf("kiln-agent %s --help shows --clock-offset, or is not the help:\n%s", cmd, out)
		}
	}
	code, _, errOut := runAgent(t, "run", "--data-dir", t.TempDir(), "--clock-offset", "soon")
	if code != exitUsage || !strings.Contains(errOut, `invalid argument "soon" for "--clock-offset"`) {
		t.Errorf("--clock-offset soon: exit %d, %q; want a usage error", code, errOut)
	}
}
