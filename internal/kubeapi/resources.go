package kubeapi

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Resources are amounts of what a node offers and a pod asks for: CPU in
// thousandths of a core, memory in bytes, and a count of pods.
type Resources struct {
	MilliCPU int64
	Memory   int64
	Pods     int64
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{MilliCPU: r.MilliCPU + o.MilliCPU, Memory: r.Memory + o.Memory, Pods: r.Pods + o.Pods}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{MilliCPU: r.MilliCPU - o.MilliCPU, Memory: r.Memory - o.Memory, Pods: r.Pods - o.Pods}
}

// Fits reports whether o fits within r.
func (r Resources) Fits(o Resources) bool {
	return o.MilliCPU <= r.MilliCPU && o.Memory <= r.Memory && o.Pods <= r.Pods
}

// String says "cpu 1500m, memory 256Mi" (memory of a GiB or more with one
// decimal: "23.5Gi").
func (r Resources) String() string {
	mem := resource.NewQuantity(r.Memory, resource.BinarySI).String()
	if r.Memory >= 1<<30 && r.Memory%(1<<30) != 0 {
		mem = fmt.Sprintf("%.1fGi", float64(r.Memory)/(1<<30))
	}
	return fmt.Sprintf("cpu %dm, memory %s", r.MilliCPU, mem)
}

// resources reads a Kubernetes resource list (allocatable, requests); a
// quantity that does not parse counts as zero.
func resources(list map[string]string) Resources {
	q := func(name string) resource.Quantity {
		v, err := resource.ParseQuantity(list[name])
		if err != nil {
			return resource.Quantity{}
		}
		return v
	}
	cpu, mem, pods := q("cpu"), q("memory"), q("pods")
	return Resources{MilliCPU: cpu.MilliValue(), Memory: mem.Value(), Pods: pods.Value()}
}
