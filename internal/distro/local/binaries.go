package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// ProgramPrefix names the programs of a directory of kiln-kube versions: the
// one for Kubernetes VERSION is kiln-kube-VERSION (make kube builds
// bin/kiln-kube-v1.35.4, bin/kiln-kube-v1.36.3, ...).
const ProgramPrefix = "kiln-kube-"

// versionTimeout bounds `kiln-kube version`.
const versionTimeout = 30 * time.Second

var versionRE = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)

// ErrNoKubeBinary: the kiln-kube path names nothing that runs Kubernetes.
var ErrNoKubeBinary = errors.New("no kiln-kube")

// KubeBinaries are the kiln-kube programs of one agent (kiln-agent
// --kube-binary PATH): Kubernetes version -> program.
type KubeBinaries map[string]string

// FindKubeBinaries returns the programs path holds:
//   - a directory: each kiln-kube-VERSION in it (VERSION is vMAJOR.MINOR.PATCH;
//     other names are ignored), so one agent installs several versions;
//   - a program: the one version it says it is (`PROGRAM version`).
//
// The programs' paths are absolute (components run in the node's root).
// Its error wraps ErrNoKubeBinary when path is missing, when a program does
// not say a version, or when a directory has no kiln-kube-VERSION.
func FindKubeBinaries(ctx context.Context, path string) (KubeBinaries, error) {
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoKubeBinary, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoKubeBinary, err)
	}
	if !st.IsDir() {
		v, err := programVersion(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrNoKubeBinary, path, err)
		}
		return KubeBinaries{v: path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoKubeBinary, err)
	}
	out := KubeBinaries{}
	for _, e := range entries {
		v, ok := strings.CutPrefix(e.Name(), ProgramPrefix)
		if !ok || !versionRE.MatchString(v) {
			continue
		}
		// os.Stat, not e.Type(): follow links; only executable files count.
		if st, err := os.Stat(filepath.Join(path, e.Name())); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			continue
		}
		out[v] = filepath.Join(path, e.Name())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no %sVERSION program", ErrNoKubeBinary, path, ProgramPrefix)
	}
	return out, nil
}

// Versions returns the versions, oldest first.
func (b KubeBinaries) Versions() []string {
	out := make([]string, 0, len(b))
	for v := range b {
		out = append(out, v)
	}
	slices.SortFunc(out, compareVersions)
	return out
}

// programVersion runs `kiln-kube version`, which prints the Kubernetes
// version it was built for (the gitVersion ldflag).
func programVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "version").Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w", path, err)
	}
	v := strings.TrimSpace(string(out))
	if !versionRE.MatchString(v) {
		return "", fmt.Errorf("%s version says %q, not vMAJOR.MINOR.PATCH (built without make kube?)", path, v)
	}
	return v, nil
}

// compareVersions orders vMAJOR.MINOR.PATCH strings numerically.
func compareVersions(a, b string) int {
	pa, pb := versionParts(a), versionParts(b)
	return slices.Compare(pa[:], pb[:])
}

func versionParts(v string) [3]int {
	var p [3]int
	_, _ = fmt.Sscanf(v, "v%d.%d.%d", &p[0], &p[1], &p[2])
	return p
}
