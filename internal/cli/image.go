package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/imagefile"
)

// Images live in kilnd's registry (/v2/, the OCI distribution API), one
// set per project. The CLI speaks that API with go-containerregistry, with
// the same server, token and CA as every other command, and names the
// repository PROJECT/NAME (see internal/registry's names.go).

// imageView is an image as the image commands print it.
type imageView struct {
	// Name is the image's name within the project, as pods ask for it:
	// nginx (Docker Hub's library/nginx), team/app.
	Name string `json:"name"`
	Tag  string `json:"tag"`
	// Repository is the registry's repository: PROJECT/NAME, with
	// library/ before a name of one component.
	Repository string `json:"repository"`
	Digest     string `json:"digest"`
	// Size is the manifest's config and layers, compressed, in bytes; 0
	// for a multi-platform index.
	Size    int64  `json:"size"`
	Project string `json:"project"`
}

func (a *app) imageCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "image",
		Aliases: []string{"images"},
		Short:   "Push, list and delete the container images of a project",
		Long: `kilnd holds a container registry (the OCI distribution API at /v2/). Each project
has its own images: its operators push and delete them, its viewers list and
pull them, and the nodes of its clusters pull them with their node
certificates. Nothing is pulled from the internet.

A name is kept as a container runtime asks for it: nginx:1.27,
library/nginx:1.27 and docker.io/library/nginx:1.27 are one image
(library/nginx, tag 1.27), and a pod of a cluster of the project that asks
for any of them runs it. The registry host of a name is dropped
(ghcr.io/team/app:1 is team/app:1).

docker and other registry clients reach it as KILND_HOST/PROJECT/NAME:TAG,
with the Kiln token as the password (docker login -u kiln KILND_HOST).`,
		Example: `  kiln image push nginx.tar nginx:1.27
  kiln image push ./app-oci-layout team/app:v2 -p team-a
  kiln image list
  kiln image delete nginx:1.27`,
	})
	cmd.AddCommand(a.imagePushCommand(), a.imageListCommand(), a.imageDeleteCommand())
	return cmd
}

func (a *app) imagePushCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "push FILE [NAME:TAG]",
		Short: "Push an image from a docker save archive, an OCI archive or an OCI layout directory",
		Long: `push uploads an image into the project's registry. FILE is an archive
written by 'docker save' (or 'podman save', or go-containerregistry's
tarball), a directory in the OCI image layout ('skopeo copy ... oci:DIR',
'buildah push ... oci:DIR'), or such a layout in a tar (an OCI archive:
'ctr images export', Kiln's scripts/oci-archive.sh); a multi-platform index
is pushed whole.

NAME:TAG names the image in the project. Without it the name recorded in
FILE is used: a docker save archive's RepoTags, or an OCI layout's
io.containerd.image.name annotation. A FILE holding several images needs
NAME:TAG to say which one.

Pushing needs the operator role in the project (-p).`,
		Example: `  docker save nginx:1.27 -o nginx.tar && kiln image push nginx.tar
  kiln image push app.tar team/app:v2 -p team-a -o json
  kiln image push ./layout demo:1`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageErrorf("%s takes FILE and an optional NAME:TAG (got %d arguments)", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			var want string
			if len(args) == 2 {
				want = args[1]
				if _, err := imagefile.ParseName(want, true); err != nil {
					return usageError{err: err, arg: "NAME:TAG"}
				}
			}
			src, err := imagefile.Open(args[0], want)
			if errors.Is(err, imagefile.ErrNameNeeded) {
				return fmt.Errorf("%w to push: kiln image push %s NAME:TAG", err, args[0])
			} else if err != nil {
				return err
			}
			defer src.Close()
			ref, err := imagefile.ParseName(src.Name, true)
			if err != nil {
				return fmt.Errorf("the name %q in %s: %w; name the image: kiln image push %s NAME:TAG", src.Name, args[0], err, args[0])
			}
			rc, s, err := a.registryClient(cmd.Context())
			if err != nil {
				return err
			}
			target := rc.tag(s.Project, ref)
			fmt.Fprintf(a.stderr, "Pushing %s to project %s (%s)...\n", ref.String(), s.Project, src.What)
			opts, progressDone := rc.opts, func() {}
			if a.isTerminal(a.stderr) {
				opts, progressDone = a.pushProgress(opts)
			}
			if src.Index != nil {
				err = remote.WriteIndex(target, src.Index, opts...)
			} else {
				err = remote.Write(target, src.Image, opts...)
			}
			progressDone()
			if err != nil {
				return rc.explain(err, "push "+ref.Short(), s.Project)
			}
			view, err := describeImage(ref, s.Project, src)
			if err != nil {
				return err
			}
			return a.emit(view, func(w io.Writer) error {
				fmt.Fprintf(w, "Pushed %s to project %s: %s%s\n", view.Name+":"+view.Tag, s.Project, view.Digest, sizeNote(view.Size))
				fmt.Fprintf(a.stderr, "Pods of project %s's clusters run it as image: %s:%s\n", s.Project, view.Name, view.Tag)
				return nil
			})
		}),
	}
}

func (a *app) imageListCommand() *cobra.Command {
	l := &listing[imageView]{what: "images", fields: imageListFields}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the images of a project: name, tag, digest, size",
		Long: `list shows every tag of every image in the project (-p): its name as pods ask
for it, its digest and its compressed size. It needs the viewer role.`,
		Example: "  kiln image list\n  kiln image list -p team-a -o json",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			rc, s, err := a.registryClient(cmd.Context())
			if err != nil {
				return err
			}
			repos, err := remote.Catalog(cmd.Context(), rc.registry, rc.opts...)
			if err != nil {
				return rc.explain(err, "list the images", s.Project)
			}
			views := []imageView{}
			for _, repo := range repos {
				rest, ok := strings.CutPrefix(repo, s.Project+"/")
				if !ok {
					continue
				}
				ref := imagefile.Name{Repository: rest}
				r := rc.registry.Repo(repo)
				tags, err := remote.List(r, rc.opts...)
				if err != nil {
					return rc.explain(err, "list the tags of "+ref.Short(), s.Project)
				}
				slices.Sort(tags)
				for _, tag := range tags {
					ref.Tag = tag
					desc, err := remote.Get(r.Tag(tag), rc.opts...)
					if err != nil {
						return rc.explain(err, "read "+ref.Short()+":"+tag, s.Project)
					}
					views = append(views, viewOf(ref, s.Project, desc))
				}
			}
			slices.SortFunc(views, func(x, y imageView) int {
				return strings.Compare(x.Name+"\x00"+x.Tag, y.Name+"\x00"+y.Tag)
			})
			if views, err = l.apply(views); err != nil {
				return err
			}
			return a.emit(v1.List[imageView]{Value: views}, func(w io.Writer) error {
				return renderImages(w, views)
			})
		}),
	}
	l.add(cmd)
	return cmd
}

// imageListFields are what the list selects and sorts by.
var imageListFields = []field[imageView]{
	{name: "name", of: func(i imageView) string { return i.Name }},
	{name: "tag", of: func(i imageView) string { return i.Tag }},
}

func (a *app) imageDeleteCommand() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:     "delete NAME:TAG [--yes]",
		Aliases: []string{"rm"},
		Short:   "Delete a tag of an image; what no tag uses any more is garbage collected",
		Long: `delete removes the tag NAME:TAG from the project's registry (NAME@DIGEST removes
that manifest and every tag of it). The registry's garbage collector then
removes the manifest if no other tag points at it, and every layer no
remaining image uses, within the hour (what is younger than an hour is
kept, so that a push in progress keeps its layers). It needs the operator
role.`,
		Example: "  kiln image delete nginx:1.27\n  kiln image delete team/app:v1 -p team-a",
		Args:    exactArgs("NAME:TAG"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			ref, err := imagefile.ParseName(args[0], false)
			if err != nil {
				return usageError{err: err, arg: "NAME:TAG"}
			}
			if ref.Tag == "" && ref.Digest == "" {
				return usageErrorf("%q names no tag: delete NAME:TAG (or NAME@DIGEST)", args[0])
			}
			rc, s, err := a.registryClient(cmd.Context())
			if err != nil {
				return err
			}
			target, err := rc.reference(s.Project, ref)
			if err != nil {
				return err
			}
			if err := a.confirmUnless(yes, fmt.Sprintf("Delete %s from project %q's registry?", ref.String(), s.Project)); err != nil {
				return err
			}
			if err := remote.Delete(target, rc.opts...); err != nil {
				return rc.explain(err, "delete "+ref.String(), s.Project)
			}
			fmt.Fprintf(a.stdout, "Deleted %s from project %s\n", ref.String(), s.Project)
			fmt.Fprintln(a.stderr, "Its layers are freed by the registry's garbage collection once no other image uses them.")
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// pushProgress adds to opts a progress line on the terminal (bytes sent
// of the total, rewritten in place); done waits for its last update and
// ends the line.
func (a *app) pushProgress(opts []remote.Option) (_ []remote.Option, done func()) {
	updates := make(chan ggcr.Update, 16)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for u := range updates {
			if u.Total > 0 {
				fmt.Fprintf(a.stderr, "\r  %s of %s sent ", humanBytes(u.Complete), humanBytes(u.Total))
			}
		}
		fmt.Fprintln(a.stderr)
	}()
	return append(slices.Clip(opts), remote.WithProgress(updates)), func() {
		select {
		case <-finished:
		case <-time.After(2 * time.Second): // a push refused before it started never closes updates
		}
	}
}

// registryClient is how the image commands reach kilnd's registry.
type registryClient struct {
	registry name.Registry
	opts     []remote.Option
}

// registryClient builds the registry client of the resolved settings: the
// server's host, its CA, the token.
func (a *app) registryClient(ctx context.Context) (*registryClient, settings, error) {
	s, err := a.settings()
	if err != nil {
		return nil, s, err
	}
	if s.Server == "" {
		return nil, s, errors.New("no server configured: run 'kiln login --server URL' or set KILN_SERVER")
	}
	u, err := url.Parse(s.Server)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, s, fmt.Errorf("server %q is not an http(s) URL", s.Server)
	}
	var nopts []name.Option
	if u.Scheme == "http" {
		nopts = append(nopts, name.Insecure)
	}
	reg, err := name.NewRegistry(u.Host, nopts...)
	if err != nil {
		return nil, s, fmt.Errorf("server %q: %w", s.Server, err)
	}
	tr, err := transportFor(s)
	if err != nil {
		return nil, s, err
	}
	return &registryClient{registry: reg, opts: []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(tr),
		remote.WithAuth(&authn.Bearer{Token: s.Token}),
		remote.WithUserAgent("kiln-cli/v1"),
	}}, s, nil
}

// transportFor is an HTTP transport that verifies the server's
// certificate with the configured CA, or with the system's when none is.
func transportFor(s settings) (*http.Transport, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if s.CA != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(s.CA)) {
			return nil, errors.New("the CA configured holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return tr, nil
}

// reference is n in project's repository of the registry.
func (rc *registryClient) reference(project string, n imagefile.Name) (name.Reference, error) {
	repo := rc.registry.Repo(project + "/" + n.Repository)
	if n.Digest != "" {
		return name.NewDigest(repo.Name() + "@" + n.Digest)
	}
	return repo.Tag(n.Tag), nil
}

// tag is n's tag in project's repository of the registry.
func (rc *registryClient) tag(project string, n imagefile.Name) name.Tag {
	return rc.registry.Repo(project + "/" + n.Repository).Tag(n.Tag)
}

// explain turns a registry error into one a user can act on: its code and
// message, and for a refused token or role what to do.
func (rc *registryClient) explain(err error, what, project string) error {
	var te *transport.Error
	if !errors.As(err, &te) {
		return fmt.Errorf("%s: %w", what, err)
	}
	code, msg := "", ""
	if len(te.Errors) > 0 {
		code, msg = string(te.Errors[0].Code), te.Errors[0].Message
	}
	switch te.StatusCode {
	case http.StatusUnauthorized:
		return &hintError{
			hint: "the registry did not accept the token: log in again with a valid one (kiln login), or check --token and KILN_TOKEN",
			err:  fmt.Errorf("%s: UNAUTHORIZED: %s", what, cmpOr(msg, "the token was refused")),
		}
	case http.StatusForbidden:
		return &hintError{
			hint: "pushing and deleting images need the operator role in the project, listing and pulling viewer; 'kiln whoami' shows your roles",
			err:  fmt.Errorf("%s: DENIED: %s", what, cmpOr(msg, "not allowed in project "+project)),
		}
	}
	if code != "" {
		return fmt.Errorf("%s: %s: %s", what, code, msg)
	}
	return fmt.Errorf("%s: the registry answered %d %s", what, te.StatusCode, http.StatusText(te.StatusCode))
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// describeImage is the view of what push sent.
func describeImage(n imagefile.Name, project string, src *imagefile.File) (imageView, error) {
	v := imageView{Name: n.Short(), Tag: n.Tag, Repository: project + "/" + n.Repository, Project: project}
	if src.Index != nil {
		d, err := src.Index.Digest()
		if err != nil {
			return v, err
		}
		v.Digest = d.String()
		return v, nil
	}
	d, err := src.Image.Digest()
	if err != nil {
		return v, err
	}
	v.Digest = d.String()
	if m, err := src.Image.Manifest(); err == nil {
		v.Size = manifestSize(m)
	}
	return v, nil
}

// viewOf is the view of a tag read from the registry.
func viewOf(n imagefile.Name, project string, desc *remote.Descriptor) imageView {
	v := imageView{Name: n.Short(), Tag: n.Tag, Repository: project + "/" + n.Repository, Project: project, Digest: desc.Digest.String()}
	if desc.MediaType.IsImage() {
		if m, err := ggcr.ParseManifest(strings.NewReader(string(desc.Manifest))); err == nil {
			v.Size = manifestSize(m)
		}
	}
	return v
}

func manifestSize(m *ggcr.Manifest) int64 {
	size := m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	return size
}

func sizeNote(size int64) string {
	if size == 0 {
		return ""
	}
	return " (" + humanBytes(size) + ")"
}

// humanBytes is a size in B, kB, MB or GB (powers of 1000, as registries
// and docker show them).
func humanBytes(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000*1000:
		return fmt.Sprintf("%.1f kB", float64(n)/1000)
	case n < 1000*1000*1000:
		return fmt.Sprintf("%.1f MB", float64(n)/1000/1000)
	}
	return fmt.Sprintf("%.2f GB", float64(n)/1000/1000/1000)
}

// renderImages prints the image table; digests are shortened as docker
// shows them.
func renderImages(w io.Writer, views []imageView) error {
	tw := newTable(w)
	row(tw, "NAME", "TAG", "DIGEST", "SIZE")
	for _, v := range views {
		size := "-"
		if v.Size > 0 {
			size = humanBytes(v.Size)
		}
		row(tw, v.Name, v.Tag, shortDigest(v.Digest), size)
	}
	return tw.Flush()
}
