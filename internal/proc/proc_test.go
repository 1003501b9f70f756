package proc

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		line string
		want Stat
		bad  bool
	}{
		{name: "plain", line: "812 (dnsmasq) S 1 812 812 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 1 0 4242 1000 100",
			want: Stat{State: 'S', Pgrp: 812, Threads: 1, Start: 4242}},
		{name: "spaces and parens in the name", line: "9 (a) b (c)) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 12 0 99 0 0",
			want: Stat{State: 'Z', Pgrp: 7, Threads: 12, Start: 99}},
		{name: "no name", line: "9 garbage", bad: true},
		{name: "short", line: "9 (x) S 1 2", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tt.line))
			if tt.bad {
				if err == nil {
					t.Fatalf("ParseStat = %+v, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseStat = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestDead(t *testing.T) {
	if (Stat{State: 'Z', Threads: 3}).Dead() {
		t.Error("a zombie main thread whose other threads still exit is not dead yet")
	}
	if !(Stat{State: 'Z', Threads: 1}).Dead() {
		t.Error("a single-threaded zombie is dead")
	}
}

func TestAliveSelf(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil || st.Start == 0 {
		t.Fatalf("ReadStat(self) = %+v, %v", st, err)
	}
	if !Alive(os.Getpid(), st.Start) {
		t.Error("this process is not alive")
	}
	if Alive(os.Getpid(), st.Start+1) {
		t.Error("a process with another start time counts as this one")
	}
}
