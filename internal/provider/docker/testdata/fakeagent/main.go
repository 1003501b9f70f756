// Command fakeagent stands in for kiln-agent in the docker provider's test
// image: a static binary, the image's only program.
//
//	fakeagent run NAME [EXIT] reports the mode of every file under
//	                          /etc/kiln (never their contents), then exits
//	                          with status EXIT if given; otherwise listens on
//	                          :6443, greets every connection with NAME and
//	                          echoes.
//	fakeagent probe ADDR      connects to ADDR and prints the first line it
//	                          reads (a greeting through a load balancer).
//	fakeagent proxy ...       runs until stopped, SIGHUP ignored (a
//	                          Service's load balancer: its proxy is
//	                          internal/lb's, tested there and in test/e2e).
package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: fakeagent run NAME [EXIT] | probe ADDR")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "run":
		run(os.Args[2], os.Args[3:])
	case "probe":
		probe(os.Args[2])
	case "proxy":
		signal.Ignore(syscall.SIGHUP)
		select {}
	}
	os.Exit(2)
}

func run(name string, rest []string) {
	fmt.Printf("fake agent %s starting\n", name)
	filepath.WalkDir("/etc/kiln", func(path string, e fs.DirEntry, err error) error {
		if err == nil {
			if info, err := e.Info(); err == nil {
				fmt.Printf("file %s %v\n", path, info.Mode())
			}
		}
		return nil
	})
	if len(rest) > 0 {
		code, _ := strconv.Atoi(rest[0])
		fmt.Fprintln(os.Stderr, "join: the controller refused the credentials")
		os.Exit(code)
	}
	ln, err := net.Listen("tcp", ":6443")
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Printf("fake agent %s listening on %s\n", name, ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			fmt.Fprintln(c, name)
			s := bufio.NewScanner(c)
			for s.Scan() {
				fmt.Fprintln(c, s.Text())
			}
		}()
	}
}

func probe(addr string) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		fmt.Println("probe:", err)
		os.Exit(1)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Println("probe:", err)
		os.Exit(1)
	}
	fmt.Print(line)
	os.Exit(0)
}
