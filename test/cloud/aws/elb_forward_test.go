package aws

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"
)

// targetServer is a target on a loopback address: it greets each
// connection with its name, echoes lines until the client half-closes,
// then says "bye" and closes.
type targetServer struct {
	name, addr string
	ln         net.Listener
}

func startTarget(t *testing.T, name, addr string) *targetServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("target %s: %v", name, err)
	}
	ts := &targetServer{name: name, addr: ln.Addr().String(), ln: ln}
	t.Cleanup(ts.stop)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintln(c, name)
				s := bufio.NewScanner(c)
				for s.Scan() {
					fmt.Fprintln(c, s.Text())
				}
				fmt.Fprintln(c, "bye")
			}()
		}
	}()
	return ts
}

func (ts *targetServer) stop() { ts.ln.Close() }

// freePort is a port nothing listens on at addr now.
func freePort(t *testing.T, addr string) int {
	t.Helper()
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// greeting connects to addr and returns the first line it answers, ""
// when the connection is closed without one.
func greeting(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == io.EOF {
		return "", nil
	}
	return strings.TrimSuffix(line, "\n"), err
}

// greetings counts the names answering n connections.
func greetings(t *testing.T, addr string, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		name, err := greeting(addr)
		if err != nil {
			t.Fatalf("connecting through the load balancer: %v", err)
		}
		seen[name]++
	}
	return seen
}

// TestNLBForwards sends real connections through a listener to two
// targets on 127.0.0.2 and 127.0.0.3 as their health changes.
func TestNLBForwards(t *testing.T) {
	a := newTestAWS(t, Options{Machines: loopbackMachines{}})
	a.network()
	a.fastELB()
	port := freePort(t, "127.0.0.2")
	ta := startTarget(t, "a", "127.0.0.2:"+strconv.Itoa(port))
	tb := startTarget(t, "b", "127.0.0.3:"+strconv.Itoa(port))
	a.addInstance("i-000000000000000aa", "vpc-1", "subnet-a", "127.0.0.2", "running")
	a.addInstance("i-000000000000000bb", "vpc-1", "subnet-b", "127.0.0.3", "running")
	c := elb.NewFromConfig(a.config(testKey))
	ctx := t.Context()

	nlb := createNLB(t, c, "api", "subnet-a", "subnet-b")
	tg := createTG(t, c, &elb.CreateTargetGroupInput{Name: awssdk.String("api"), Port: awssdk.Int32(int32(port)),
		HealthCheckIntervalSeconds: awssdk.Int32(5), HealthyThresholdCount: awssdk.Int32(2), UnhealthyThresholdCount: awssdk.Int32(2)})
	if _, err := c.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: tg.TargetGroupArn,
		Targets: []types.TargetDescription{{Id: awssdk.String("i-000000000000000aa")}, {Id: awssdk.String("i-000000000000000bb")}}}); err != nil {
		t.Fatal(err)
	}
	lport := freePort(t, "127.0.0.1")
	if _, err := c.CreateListener(ctx, &elb.CreateListenerInput{LoadBalancerArn: nlb.LoadBalancerArn, Protocol: types.ProtocolEnumTcp,
		Port: awssdk.Int32(int32(lport)), DefaultActions: forward(*tg.TargetGroupArn)}); err != nil {
		t.Fatal(err)
	}
	top := t // targets restarted in a subtest outlive it
	front := net.JoinHostPort(*nlb.DNSName, strconv.Itoa(lport))
	waitHealth := func(t *testing.T, want map[string]types.TargetHealthStateEnum) {
		t.Helper()
		eventually(t, "target health", func() string {
			out, err := c.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: tg.TargetGroupArn})
			if err != nil {
				return err.Error()
			}
			have := map[string]types.TargetHealthStateEnum{}
			for _, d := range out.TargetHealthDescriptions {
				have[*d.Target.Id] = d.TargetHealth.State
			}
			if fmt.Sprint(have) != fmt.Sprint(want) {
				return fmt.Sprintf("%v; want %v", have, want)
			}
			return ""
		})
	}

	t.Run("both healthy: connections reach both", func(t *testing.T) {
		waitHealth(t, map[string]types.TargetHealthStateEnum{"i-000000000000000aa": "healthy", "i-000000000000000bb": "healthy"})
		if seen := greetings(t, front, 6); seen["a"] == 0 || seen["b"] == 0 || seen["a"]+seen["b"] != 6 {
			t.Errorf("answers by target = %v; want both", seen)
		}
	})
	t.Run("bytes both ways, half-close kept", func(t *testing.T) {
		conn, err := net.Dial("tcp", front)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
		fmt.Fprintln(conn, "hello")
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		all, err := io.ReadAll(conn)
		if got := string(all); err != nil || !strings.HasSuffix(got, "\nhello\nbye\n") {
			t.Errorf("answer = %q, %v; want NAME, hello, bye (the target saw the half-close and still answered)", got, err)
		}
	})
	t.Run("one stopped: only the other gets connections", func(t *testing.T) {
		ta.stop()
		waitHealth(t, map[string]types.TargetHealthStateEnum{"i-000000000000000aa": "unhealthy", "i-000000000000000bb": "healthy"})
		if seen := greetings(t, front, 4); seen["b"] != 4 {
			t.Errorf("answers by target = %v; want b only", seen)
		}
	})
	t.Run("both down: fail open, a refused connection is closed", func(t *testing.T) {
		tb.stop()
		waitHealth(t, map[string]types.TargetHealthStateEnum{"i-000000000000000aa": "unhealthy", "i-000000000000000bb": "unhealthy"})
		if name, err := greeting(front); err != nil || name != "" {
			t.Errorf("with no target listening: %q, %v; want the connection accepted, then closed", name, err)
		}
		// Both unhealthy, one back: fail open sends connections to it
		// before any health check says it is healthy.
		a.mu.Lock()
		a.elb().rt.interval = time.Hour
		a.mu.Unlock()
		ta = startTarget(top, "a", ta.addr)
		if seen := greetings(t, front, 3); seen["a"] != 3 {
			t.Errorf("answers by target = %v; want a (unhealthy, failed open)", seen)
		}
		a.fastELB()
	})
	t.Run("a draining target gets no connection", func(t *testing.T) {
		tb = startTarget(top, "b", tb.addr)
		waitHealth(t, map[string]types.TargetHealthStateEnum{"i-000000000000000aa": "healthy", "i-000000000000000bb": "healthy"})
		if _, err := c.DeregisterTargets(ctx, &elb.DeregisterTargetsInput{TargetGroupArn: tg.TargetGroupArn,
			Targets: []types.TargetDescription{{Id: awssdk.String("i-000000000000000aa")}}}); err != nil {
			t.Fatal(err)
		}
		waitHealth(t, map[string]types.TargetHealthStateEnum{"i-000000000000000aa": "draining", "i-000000000000000bb": "healthy"})
		if seen := greetings(t, front, 3); seen["b"] != 3 {
			t.Errorf("answers by target = %v; want b only (a is draining)", seen)
		}
	})
	t.Run("the listener survives a restart", func(t *testing.T) {
		a.Close()
		if _, err := greeting(front); err == nil {
			t.Fatalf("the listener still answers after Close")
		}
		b := newTestAWS(t, Options{StatePath: a.State, Machines: loopbackMachines{}})
		b.fastELB()
		eventually(t, "the listener after a restart", func() string {
			name, err := greeting(front)
			if err != nil || name != "b" {
				return fmt.Sprintf("%q, %v", name, err)
			}
			return ""
		})
		bc := elb.NewFromConfig(b.config(testKey))
		if _, err := bc.DeleteLoadBalancer(ctx, &elb.DeleteLoadBalancerInput{LoadBalancerArn: nlb.LoadBalancerArn}); err != nil {
			t.Fatal(err)
		}
		if _, err := greeting(front); err == nil {
			t.Errorf("the listener still answers after DeleteLoadBalancer")
		}
	})
}

// TestNLBListenerCannotListen checks that a listener whose port is taken
// fails its load balancer, with the reason.
func TestNLBListenerCannotListen(t *testing.T) {
	a := newTestAWS(t, Options{Machines: loopbackMachines{}})
	a.network()
	a.fastELB()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	c := elb.NewFromConfig(a.config(testKey))
	ctx := t.Context()
	nlb := createNLB(t, c, "api", "subnet-a")
	tg := createTG(t, c, &elb.CreateTargetGroupInput{Name: awssdk.String("api"), Port: awssdk.Int32(6443)})
	if _, err := c.CreateListener(ctx, &elb.CreateListenerInput{LoadBalancerArn: nlb.LoadBalancerArn, Protocol: types.ProtocolEnumTcp,
		Port: awssdk.Int32(int32(port)), DefaultActions: forward(*tg.TargetGroupArn)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the load balancer's state", func() string {
		out, err := c.DescribeLoadBalancers(ctx, &elb.DescribeLoadBalancersInput{LoadBalancerArns: []string{*nlb.LoadBalancerArn}})
		if err != nil {
			return err.Error()
		}
		st := out.LoadBalancers[0].State
		if st.Code == types.LoadBalancerStateEnumFailed && strings.Contains(awssdk.ToString(st.Reason), strconv.Itoa(port)) {
			return ""
		}
		return fmt.Sprintf("%s %q; want failed, naming port %d", st.Code, awssdk.ToString(st.Reason), port)
	})
}
