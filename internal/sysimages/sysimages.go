// Package sysimages names the system images: the images every real
// cluster's nodes pull from kilnd's registry whatever their project,
// built by Kiln from source (make system-images; docs/system-images.md)
// and seeded by kilnd at start into the registry's kiln.system namespace
// (internal/registry's Seed). The controller's manifests and the tests
// take the names from here.
//
// A node asking for kiln.dev/coredns:1.15.0 gets the image stored as
// kiln.system/library/coredns:1.15.0: containerd asks the registry mirror
// for /v2/coredns/manifests/1.15.0?ns=kiln.dev, and the registry drops
// the host and reads a name of one component as library/NAME.
//
// scripts/system-images.sh reads the names of this file (the lines
// NAME = "..."), so they are written out in full, one a line.
package sysimages

const (
	// CoreDNSImage is the cluster DNS, CoreDNS built from its Go module
	// (images/coredns) with the plugins a cluster's DNS needs; its tag is
	// the CoreDNS version images/coredns/go.mod requires.
	CoreDNSImage = "kiln.dev/coredns:1.15.0"
	// DemoImage is the demo application (images/demo): an HTTP server on
	// :8080 answering "hello from POD on NODE" (env POD_NAME and
	// NODE_NAME), /healthz for probes.
	DemoImage = "kiln.dev/demo:1"
)
