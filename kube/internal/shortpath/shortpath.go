// Package shortpath gives a deep directory a short name: a symlink in /tmp. The kubelet
// listens on unix sockets under its root directory, and a socket's path (sun_path) holds
// 108 bytes. Apart from the components' imports so that its unit test runs in a second.
package shortpath

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Prefix begins every link's name.
const Prefix = "kiln-kubelet-"

// Link makes dir/Prefix<hash of target> a symlink to target and returns it. It first
// removes the links of that shape whose target is gone: a kubelet killed (its process
// stopped by a signal it does not catch) cannot remove its own, and its directory goes
// with its node.
func Link(dir, target string) (string, error) {
	Sweep(dir)
	sum := sha256.Sum256([]byte(target))
	link := filepath.Join(dir, Prefix+hex.EncodeToString(sum[:6]))
	if t, err := os.Readlink(link); err == nil && t == target {
		return link, nil
	}
	_ = os.Remove(link)
	if err := os.Symlink(target, link); err != nil {
		return "", fmt.Errorf("short path for the kubelet root %s: %w", target, err)
	}
	return link, nil
}

// Sweep removes the links in dir named Prefix... whose target no longer exists, and
// returns how many it removed. A link to a directory that exists stays: another kubelet
// may be using it.
func Sweep(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), Prefix) || e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) && os.Remove(p) == nil {
			n++
		}
	}
	return n
}
