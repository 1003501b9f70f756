package azure_test

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v7"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
	"kiln.dev/kiln/internal/provider/azure"
	azurelocal "kiln.dev/kiln/test/cloud/azure"
)

// memCheckpoint is a step's checkpoint (provider.Checkpoint) as the plan
// keeps it, in memory: what a worker's attempt kept is what the next
// attempt reads. kill, when set, is called after a value is kept under
// killAt: a worker dying right after ARM answered a write.
type memCheckpoint struct {
	mu     sync.Mutex
	m      map[string]string
	killAt string
	kill   func()
}

func (c *memCheckpoint) Get(key string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

func (c *memCheckpoint) Set(_ context.Context, key, value string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]string{}
	}
	if value == "" {
		delete(c.m, key)
	} else {
		c.m[key] = value
	}
	if value != "" && key == c.killAt && c.kill != nil {
		c.kill()
	}
	return nil
}

func (c *memCheckpoint) kept() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

// countPUTs counts, from now on, the PUTs of ARM paths ending in suffix,
// calling each of then after each is answered.
func countPUTs(l *local, suffix string, then ...func()) func() int {
	var mu sync.Mutex
	n := 0
	l.setOnCall(func(r *http.Request) {
		if r.Method == http.MethodPut && strings.HasSuffix(strings.ToLower(r.URL.Path), strings.ToLower(suffix)) {
			mu.Lock()
			n++
			mu.Unlock()
			for _, f := range then {
				f()
			}
		}
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// A pool's scale set, as TestKilledInTheMiddle's "resumed" network: killed
// right after its PUT was answered and its token kept, the next GrowPool resumes the set's operation, waits for its
// end, and finds its machines: one PUT of the set, one set, two machines.
func TestResumePoolAfterKill(t *testing.T) {
	t.Parallel()
	l := newLocal(t, azurelocal.Options{Images: []string{version}})
	n := newNetwork()
	c := cluster(l, "c1")
	if _, err := n.EnsureNetwork(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	const set = "virtualMachineScaleSets/kiln-pool-default"
	ctx, kill := context.WithCancel(t.Context())
	cp := &memCheckpoint{killAt: set, kill: kill}
	puts := countPUTs(l, "/"+set)
	pool := provider.MachineSpec{Role: v1.RoleWorker, Pool: "default", Revision: "r1"}
	if _, err := n.GrowPool(provider.WithCheckpoint(ctx, cp), c, pool, nil, 2); err == nil {
		t.Fatal("the killed GrowPool succeeded; want it cut short")
	}
	if kept := cp.kept(); len(kept) != 1 || kept[set] == "" {
		t.Fatalf("after the kill the checkpoint holds %v; want the scale set's resume token alone", kept)
	}
	// Without the resume, the set's operation would never end (nobody
	// polls it), nor would its machines': bounded, so that it fails.
	again, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	grown, err := n.GrowPool(provider.WithCheckpoint(again, cp), c, pool, nil, 2)
	if err != nil || len(grown) != 2 {
		t.Fatalf("GrowPool after the kill = %+v, %v; want 2 machines", grown, err)
	}
	if got := puts(); got != 1 {
		t.Errorf("the scale set was PUT %d times; want once", got)
	}
	if kept := cp.kept(); len(kept) != 0 {
		t.Errorf("after the operations ended the checkpoint holds %v; want nothing", kept)
	}
	var sets []*armcompute.VirtualMachineScaleSet
	pages := l.clients(t).compute.NewVirtualMachineScaleSetsClient().NewListPager(azure.GroupName("p", "c1"), nil)
	for pages.More() {
		page, err := pages.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		sets = append(sets, page.Value...)
	}
	if len(sets) != 1 || deref(sets[0].SKU.Capacity) != 2 || deref(sets[0].Properties.ProvisioningState) != "Succeeded" {
		t.Fatalf("the group has %d scale sets (%+v); want one, capacity 2, Succeeded: its operation resumed to its end", len(sets), sets)
	}
}
