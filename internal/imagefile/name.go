package imagefile

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Name is an image's name as a container runtime asks a registry mirror
// for it, which is how Kiln's registry keeps it within a project
// (internal/registry's names.go): no registry host, and Docker Hub's
// library/ before a name of one component. nginx:1.27,
// docker.io/library/nginx:1.27 and kiln.dev/nginx:1.27 are all
// library/nginx, tag 1.27.
type Name struct {
	Repository string // library/nginx, team/app
	Tag        string
	Digest     string
}

// ErrNoTag: a name without a tag where one is needed (a push).
var ErrNoTag = errors.New("names no tag: give NAME:TAG, for example nginx:1.27")

// ParseName reads NAME[:TAG][@DIGEST] as a container runtime does: the
// registry host is dropped and a name of one component is Docker Hub's
// library/NAME. needTag: a tag is required (a push).
func ParseName(s string, needTag bool) (Name, error) {
	if s == "" {
		return Name{}, errors.New("the image name is empty")
	}
	ref, err := name.ParseReference(s, name.WithDefaultTag(""))
	if err != nil {
		return Name{}, fmt.Errorf("%q is not an image name (NAME:TAG, for example nginx:1.27 or team/app:v2): %w", s, err)
	}
	n := Name{Repository: ref.Context().RepositoryStr()}
	if !strings.Contains(n.Repository, "/") {
		n.Repository = "library/" + n.Repository
	}
	switch r := ref.(type) {
	case name.Tag:
		n.Tag = r.TagStr()
	case name.Digest:
		n.Digest = r.DigestStr()
	}
	if needTag && n.Tag == "" {
		return Name{}, fmt.Errorf("%q %w", s, ErrNoTag)
	}
	return n, nil
}

// Short is the name as pods ask for it: nginx for library/nginx.
func (n Name) Short() string {
	if rest, ok := strings.CutPrefix(n.Repository, "library/"); ok && !strings.Contains(rest, "/") {
		return rest
	}
	return n.Repository
}

// String is the short name with its tag or digest.
func (n Name) String() string {
	if n.Digest != "" {
		return n.Short() + "@" + n.Digest
	}
	return n.Short() + ":" + n.Tag
}
