// Command testreport reads `go test -json` and says where the time went and
// what failed: packages by time, the slowest top-level tests, the tests that
// were skipped and why, and last (where a reader of a cut log looks) the whole
// output of every failed test. scripts/test-all.sh pipes its run through it;
// run it on demand on a kept file:
//
//	go test -json ./... | go run ./test/testreport -o .tmp/test-all.json
//	go run ./test/testreport .tmp/test-all.json
//
// With -o it copies its input to that file as it reads, printing a line as
// each package ends and as each failed or slow test ends. It exits 1 when a
// package or test failed or never ended, 2 on a usage or I/O error.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	out := flag.String("o", "", "copy the `go test -json` stream from standard input to this `file`, printing progress, then the report")
	top := flag.Int("top", 25, "how many of the slowest top-level tests to list")
	names := flag.Bool("failed", false, "print only the names of the tests that failed or never ended, one a line (PACKAGE TEST)")
	slow := flag.Float64("slow", 30, "with -o, print a top-level test's pass when it took at least this many `seconds`")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go test -json ... | testreport -o FILE [flags]\n       testreport [flags] FILE...\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if (*out == "") == (flag.NArg() == 0) {
		flag.Usage()
		os.Exit(2)
	}
	r := newRun()
	var err error
	if *out != "" {
		err = tee(r, os.Stdin, *out, os.Stdout, *slow)
	} else {
		for _, name := range flag.Args() {
			if err = readFile(r, name); err != nil {
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if *names {
		for _, f := range r.failures() {
			fmt.Println(f.name())
		}
	} else {
		r.write(os.Stdout, options{top: *top})
	}
	if r.failed() {
		os.Exit(1)
	}
}

func readFile(r *run, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := r.read(f); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// tee reads the stream from in, keeps every line in the file named out,
// and prints progress to w as events end packages and tests.
func tee(r *run, in io.Reader, out string, w io.Writer, slow float64) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	keep := bufio.NewWriter(f)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		// Each line written as it comes, so the file says where a run is
		// (and where it was, when the run is killed).
		keep.Write(line)
		keep.WriteByte('\n')
		if err := keep.Flush(); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", out, err)
		}
		ev, res := r.add(line)
		if ev == nil {
			fmt.Fprintln(w, string(line)) // vet's or a build's own output
		} else if p := progress(ev, res, slow); p != "" {
			fmt.Fprintln(w, p)
		}
	}
	if err := sc.Err(); err != nil {
		f.Close()
		return fmt.Errorf("read the stream: %w", err)
	}
	return f.Close()
}
