package aws

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// dockerAWS is a local AWS whose instances are containers, with every
// Docker object it makes removed at the test's end; the test is skipped
// when there is no engine or no node image on it.
func dockerAWS(t *testing.T) (*testAWS, *DockerMachines, *image) {
	t.Helper()
	return dockerAWSWith(t, DockerOptions{})
}

// dockerAWSWith is dockerAWS with options (Identity and Repository are
// the test's).
func dockerAWSWith(t *testing.T, o DockerOptions) (*testAWS, *DockerMachines, *image) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	// KILN_AWS_TEST_NODE_REPOSITORY runs the test with other images than
	// kiln/node (any image with /bin/sh and coreutils will do).
	o.Identity, o.Repository = "test"+hex.EncodeToString(b), os.Getenv("KILN_AWS_TEST_NODE_REPOSITORY")
	m, err := NewDockerMachines(t.Context(), o)
	if err != nil {
		t.Skipf("no Docker engine: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.RemoveAll(ctx); err != nil {
			t.Errorf("cleaning up the test's Docker objects: %v", err)
		}
		m.Close()
	})
	ims, err := m.Images(t.Context())
	if err != nil || len(ims) == 0 {
		t.Skipf("no node image kiln/node on the Docker engine (make node-image builds it): %v", err)
	}
	a := newTestAWS(t, Options{Machines: m})
	return a, m, ims[0]
}

func dockerOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestDockerInstances(t *testing.T) {
	a, m, im := dockerAWS(t)
	if other := m.Overlapping(t.Context(), netip.MustParsePrefix("10.213.1.0/24")); other != "" {
		t.Skipf("the test's range 10.213.1.0/24 overlaps the Docker network %s", other)
	}
	sn := addSubnet(t, a, "subnet-0000000000000d0c1", "vpc-0000000000000d0c1", "10.213.1.0/24", "us-east-1a")
	c := ec2.NewFromConfig(a.config(testKey))
	ctx := t.Context()
	waitFor(t, 10*time.Second, "the node image as an AMI", func() (bool, string) {
		out, err := c.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{im.ID}})
		return err == nil && len(out.Images) == 1, "not described"
	})
	script := "#!/bin/sh\necho \"booted $(hostname)\" >> /var/lib/kiln-test\n"
	i := runOne(t, c, &ec2.RunInstancesInput{ImageId: &im.ID, InstanceType: "t3.small", SubnetId: &sn,
		UserData: awssdk.String(base64.StdEncoding.EncodeToString([]byte(script)))})
	id := *i.InstanceId
	name := m.name(id)
	waitState(t, c, id, types.InstanceStateNameRunning)
	if got := dockerOut(t, "inspect", "-f", "{{(index .NetworkSettings.Networks \""+m.name("vpc-0000000000000d0c1")+"\").IPAddress}}", name); got != "10.213.1.4" {
		t.Errorf("the container's address is %q, want the instance's 10.213.1.4", got)
	}
	readFile := func() string {
		var got string
		waitFor(t, 60*time.Second, "the user data's file", func() (bool, string) {
			out, err := exec.CommandContext(ctx, "docker", "exec", name, "cat", "/var/lib/kiln-test").CombinedOutput()
			got = strings.TrimSpace(string(out))
			return err == nil && got != "", got
		})
		return got
	}
	if got := readFile(); got != "booted ip-10-213-1-4" {
		t.Errorf("the user data wrote %q", got)
	}
	gw, err := m.Address(ctx, &subnet{ID: sn, VPCID: "vpc-0000000000000d0c1", CIDR: "10.213.1.0/24"})
	if err != nil || gw.String() != "10.213.1.1" {
		t.Errorf("Address: %v %v; want 10.213.1.1", gw, err)
	}

	// Stop and start: the same address, /var kept, the user data not run again.
	if _, err := c.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, id, types.InstanceStateNameStopped)
	if st := dockerOut(t, "inspect", "-f", "{{.State.Status}}", name); st != "exited" {
		t.Errorf("a stopped instance's container is %s", st)
	}
	if _, err := c.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	if got := waitState(t, c, id, types.InstanceStateNameRunning); *got.PrivateIpAddress != "10.213.1.4" {
		t.Errorf("after a start the address is %s", *got.PrivateIpAddress)
	}
	if got := readFile(); got != "booted ip-10-213-1-4" {
		t.Errorf("after a stop and start /var/lib/kiln-test is %q; want the first boot's line alone", got)
	}

	// Stopped behind the API's back: the instance is stopped.
	dockerOut(t, "stop", "-t", "1", name)
	if got := waitState(t, c, id, types.InstanceStateNameStopped); *got.StateReason.Code != "Client.InstanceInitiatedShutdown" {
		t.Errorf("a container stopped outside: reason %s", *got.StateReason.Code)
	}

	// Terminated: the container and its volume are gone.
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, id, types.InstanceStateNameTerminated)
	if out := dockerOut(t, "ps", "-a", "-q", "--filter", "name="+name); out != "" {
		t.Errorf("the terminated instance's container remains: %s", out)
	}

	// A container removed outside: its instance is marked lost, not forgotten.
	j := runOne(t, c, &ec2.RunInstancesInput{ImageId: &im.ID, InstanceType: "t3.small", SubnetId: &sn})
	waitState(t, c, *j.InstanceId, types.InstanceStateNameRunning)
	dockerOut(t, "rm", "-f", m.name(*j.InstanceId))
	if got := waitState(t, c, *j.InstanceId, types.InstanceStateNameTerminated); *got.StateReason.Code != "Server.InternalError" || !strings.Contains(*got.StateReason.Message, "gone") {
		t.Errorf("an instance whose container was removed: %s %s", *got.StateReason.Code, *got.StateReason.Message)
	}
}
