package nodeimage

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestSeccompProfile(t *testing.T) {
	var p struct {
		DefaultAction string `json:"defaultAction"`
		Syscalls      []struct {
			Names  []string `json:"names"`
			Action string   `json:"action"`
		} `json:"syscalls"`
	}
	if err := json.Unmarshal(SeccompProfile, &p); err != nil {
		t.Fatalf("seccomp.json: %v", err)
	}
	denied := map[string]bool{}
	for _, s := range p.Syscalls {
		if s.Action != "SCMP_ACT_ERRNO" {
			t.Errorf("%v: action %s, want SCMP_ACT_ERRNO", s.Names, s.Action)
		}
		for _, n := range s.Names {
			denied[n] = true
		}
	}
	// What runc and containerd need to start the node's containers must stay allowed; what
	// acts on the whole host must not.
	for _, n := range []string{"pivot_root", "keyctl", "add_key", "mount", "umount2", "unshare", "setns", "clone", "clone3"} {
		if denied[n] {
			t.Errorf("%s is denied: runc needs it", n)
		}
	}
	for _, n := range []string{"init_module", "finit_module", "kexec_load", "open_by_handle_at", "swapon", "settimeofday", "clock_settime"} {
		if !denied[n] {
			t.Errorf("%s is allowed: it acts on the host", n)
		}
	}
}

func TestDockerRunArgsGrantNoMore(t *testing.T) {
	args := DockerRunArgs("/p.json")
	for _, bad := range []string{"--privileged", "ALL", "seccomp=unconfined", "--device-cgroup-rule", "--pid", "--network=host"} {
		if slices.Contains(args, bad) {
			t.Errorf("DockerRunArgs has %s: %q", bad, args)
		}
	}
	if got := Image("v1.36.3"); got != "kiln/node:v1.36.3" {
		t.Errorf("Image = %q", got)
	}
}
