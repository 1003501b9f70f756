// Command hello is the workload of the node image's test (test/node): a static program packed
// as a one-layer image (scripts/oci-archive.sh). It prints a line, so the pod's log shows that
// its container really ran, then answers HTTP on :8080 with its host name until stopped.
// `hello once` prints the line and exits (what the test runs with kubectl exec); `hello lookup NAME`
// prints NAME's addresses, resolved through the pod's DNS; `hello get URL` prints the body of
// GET URL (from inside a pod: another pod, a Service's ClusterIP or name); `hello whoami DIR`
// prints its user, group and supplementary groups, whether its root filesystem is writable, and
// DIR's group and whether it can write there (what a pod's security context sets); `hello bench
// URL SECONDS WORKERS [new]` GETs URL from WORKERS goroutines for SECONDS and prints the requests
// per second (with new, each request on a connection of its own). test/e2e's docker tests use it
// too.
package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	host, _ := os.Hostname()
	fmt.Printf("hello from %s\n", host)
	if len(os.Args) > 1 && os.Args[1] == "once" {
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "get" {
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get(os.Args[2])
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(os.Stdout, resp.Body); err != nil {
			log.Fatal(err)
		}
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "lookup" {
		addrs, err := net.LookupHost(os.Args[2])
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s has addresses %s\n", os.Args[2], strings.Join(addrs, " "))
		return
	}
	if len(os.Args) > 4 && os.Args[1] == "bench" {
		bench(os.Args[2], os.Args[3], os.Args[4], len(os.Args) > 5 && os.Args[5] == "new")
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "whoami" {
		whoami(os.Args[2])
		return
	}
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", host)
	})
	log.Fatal(http.ListenAndServe(":8080", nil))
}

// whoami prints what the process runs as and what it may write, one line:
// "uid=U gid=G groups=A,B root=read-only|writable DIR=gid:N,writable|read-only".
func whoami(dir string) {
	groups, _ := os.Getgroups()
	gs := make([]string, len(groups))
	for i, g := range groups {
		gs[i] = strconv.Itoa(g)
	}
	root := "writable"
	if err := os.WriteFile("/hello-probe", nil, 0o600); err != nil {
		root = "read-only"
	}
	info := "missing"
	if st, err := os.Stat(dir); err == nil {
		info = "gid:?"
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			info = fmt.Sprintf("gid:%d", sys.Gid)
		}
		if err := os.WriteFile(filepath.Join(dir, "hello-probe"), nil, 0o600); err != nil {
			info += ",read-only"
		} else {
			info += ",writable"
		}
	}
	fmt.Printf("uid=%d gid=%d groups=%s root=%s %s=%s\n", os.Getuid(), os.Getgid(), strings.Join(gs, ","), root, dir, info)
}

// bench GETs url from workers goroutines for seconds and prints one line,
// "requests=N errors=E seconds=S rps=R" (R counts the answered requests).
// With fresh, every request opens a connection of its own (no keep-alive).
func bench(url, seconds, workers string, fresh bool) {
	secs, err := strconv.ParseFloat(seconds, 64)
	if err != nil {
		log.Fatalf("seconds %q: %v", seconds, err)
	}
	n, err := strconv.Atoi(workers)
	if err != nil || n < 1 {
		log.Fatalf("workers %q: want a positive number", workers)
	}
	tr := &http.Transport{DisableKeepAlives: fresh, MaxIdleConnsPerHost: n}
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var ok, failed atomic.Int64
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				resp, err := c.Get(url)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Add(1)
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start).Seconds()
	fmt.Printf("requests=%d errors=%d seconds=%.2f rps=%.1f\n", ok.Load(), failed.Load(), took, float64(ok.Load())/took)
}
