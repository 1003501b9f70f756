package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) clusterApplyCommand() *cobra.Command {
	var (
		file string
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--wait]",
		Short: "Create a cluster from a file, or change it to what the file says",
		Long: `apply makes the cluster be what a YAML or JSON file (-f, "-" for stdin) says:
it creates the cluster when there is none by the file's name, and otherwise
replaces its spec with the file's (read, replace, write with If-Match, again
when another change got there first). The file is the format of
'cluster create -f' and 'cluster get -o yaml' (id, etag and status are
ignored), decoded strictly.

The file's spec is the whole spec: fields it leaves out get the server's
defaults, as on create (a file saved by 'kiln cluster get NAME -o yaml' has
every field). The server checks it first, as 'cluster create --dry-run'
does: a spec it refuses is not sent (every problem is listed), and one the
cluster has already changes nothing.`,
		Example: "  kiln cluster get dev -o yaml > dev.yaml; $EDITOR dev.yaml; kiln cluster apply -f dev.yaml --wait\n  kiln cluster apply -f cluster.yaml",
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageErrorf("apply needs -f FILE (\"-\" for stdin)")
			}
			data, err := a.readInput(file, "cluster file")
			if err != nil {
				return err
			}
			want, err := decodeClusterFile(data, file)
			if err != nil {
				return err
			}
			if want.Name == "" {
				return fmt.Errorf("%s: the cluster has no name: set its name field", file)
			}
			return a.applyCluster(cmd, &v1.Cluster{Name: want.Name, Spec: want.Spec}, wait)
		}),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `cluster file, YAML or JSON ("-" for stdin)`)
	waitFlag(cmd, &wait, "")
	return cmd
}

// applyCluster creates want, or replaces the spec of the cluster by its
// name with want's. The server's dry run says first what the spec would be
// with its defaults: the same as the cluster's changes nothing, and a spec
// it refuses is not sent.
func (a *app) applyCluster(cmd *cobra.Command, want *v1.Cluster, wait bool) error {
	ctx := cmd.Context()
	c, s, err := a.client()
	if err != nil {
		return err
	}
	cur, err := c.GetCluster(ctx, s.Project, want.Name)
	var ae *client.APIError
	if errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound && ae.Err.Target == "cluster" {
		return a.createCluster(cmd, want, wait)
	}
	if err != nil {
		return err
	}
	res, err := c.ValidateCluster(ctx, s.Project, want)
	switch {
	case err == nil && sameSpec(&res.Spec, &cur.Spec):
		fmt.Fprintf(a.stderr, "Cluster %q has the file's spec already; nothing changed.\n", want.Name)
		return a.printCluster(cur)
	case statusOf(err) == http.StatusServiceUnavailable:
		// The provider cannot be asked now; the update's first step
		// asks it again.
	case err != nil:
		return err
	}
	return a.changeCluster(cmd, want.Name, wait, func(spec *v1.ClusterSpec) (string, error) {
		*spec = want.Spec
		return fmt.Sprintf("Updating cluster %q", want.Name), nil
	})
}

// sameSpec compares two specs as the API writes them.
func sameSpec(x, y *v1.ClusterSpec) bool {
	bx, errX := json.Marshal(x)
	by, errY := json.Marshal(y)
	return errX == nil && errY == nil && bytes.Equal(bx, by)
}

func (a *app) clusterEditCommand() *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "edit NAME [--wait]",
		Short: "Edit a cluster's spec in your editor",
		Long: `edit opens the cluster's name and spec as YAML in an editor ($KILN_EDITOR,
else $VISUAL, else $EDITOR, else vi) and, when you save a change and quit,
sends it with If-Match: the cluster as you read it. Saving it unchanged
changes nothing.

A file that does not decode (YAML, unknown fields), a spec the server refuses
(every problem is listed) or a cluster changed by someone else meanwhile
changes nothing: the error is shown, and your edit is kept in a file to fix
and send with 'kiln cluster apply -f FILE'.`,
		Example: "  kiln cluster edit dev\n  KILN_EDITOR=nano kiln cluster edit dev --wait",
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return a.editCluster(cmd, args[0], wait)
		}),
	}
	waitFlag(cmd, &wait, "")
	return cmd
}

// editHeader opens the file 'cluster edit' hands to the editor.
const editHeader = `# Edit the spec of cluster %q in project %q, save and quit: the change is
# sent with If-Match (the cluster as read now). Saved unchanged, nothing is
# sent. Lines starting with '#' are ignored. Fields: docs/api.md.
`

func (a *app) editCluster(cmd *cobra.Command, name string, wait bool) error {
	ctx := cmd.Context()
	c, s, err := a.client()
	if err != nil {
		return err
	}
	cl, err := c.GetCluster(ctx, s.Project, name)
	if err != nil {
		return err
	}
	body, err := yaml.Marshal(struct {
		Name string         `json:"name"`
		Spec v1.ClusterSpec `json:"spec"`
	}{cl.Name, cl.Spec})
	if err != nil {
		return fmt.Errorf("encode yaml: %w", err)
	}
	original := append(fmt.Appendf(nil, editHeader, name, s.Project), body...)
	f, err := os.CreateTemp("", "kiln-edit-"+name+"-*.yaml")
	if err != nil {
		return fmt.Errorf("edit: %w", err)
	}
	path := f.Name()
	_, err = f.Write(original)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("edit: write %s: %w", path, err)
	}
	keep := false
	defer func() {
		if !keep {
			os.Remove(path)
		}
	}()
	if err := a.runEditor(cmd, path); err != nil {
		return err
	}
	edited, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("edit: read %s: %w", path, err)
	}
	// kept is err with where the edit is and how to send it.
	kept := func(err error) error {
		keep = true
		return &hintError{err: err, hint: fmt.Sprintf("nothing was changed; your edit is in %s: fix it and send it with 'kiln cluster apply -f %s'", path, path)}
	}
	if bytes.Equal(edited, original) || len(bytes.TrimSpace(edited)) == 0 {
		fmt.Fprintf(a.stderr, "Edit canceled: cluster %q was not changed.\n", name)
		return nil
	}
	next, err := decodeClusterFile(edited, filepath.Base(path))
	if err != nil {
		return kept(err)
	}
	if next.Name != "" && next.Name != name {
		return kept(fmt.Errorf("the name cannot change in an edit (%q to %q): 'kiln cluster apply -f FILE' with a new name creates another cluster", name, next.Name))
	}
	if before, err := decodeClusterFile(original, path); err == nil && sameSpec(&before.Spec, &next.Spec) {
		fmt.Fprintf(a.stderr, "Edit canceled: the spec of cluster %q is unchanged.\n", name)
		return nil
	}
	out, opID, err := c.PutCluster(ctx, s.Project, &v1.Cluster{Name: name, Spec: next.Spec}, cl.ETag)
	if statusOf(err) == http.StatusPreconditionFailed {
		keep = true
		return &hintError{err: err, hint: fmt.Sprintf("cluster %q changed since it was opened for editing, and nothing was changed; your edit is in %s: run 'kiln cluster edit %s' again, or send it as it is with 'kiln cluster apply -f %s'", name, path, name, path)}
	}
	if err != nil {
		return kept(err)
	}
	if !wait {
		fmt.Fprintf(a.stderr, "Updating cluster %q (operation %s).\n", name, opID)
		return a.printCluster(out)
	}
	fmt.Fprintf(a.stderr, "Updating cluster %q.\n", name)
	return a.waitAndPrintCluster(cmd, c, s.Project, name, opID)
}

// runEditor opens path in the user's editor and waits for it. The editor
// setting may hold arguments ("code --wait"): a shell runs it.
func (a *app) runEditor(cmd *cobra.Command, path string) error {
	editor := "vi"
	for _, k := range []string{"KILN_EDITOR", "VISUAL", "EDITOR"} {
		if v := a.env[k]; v != "" {
			editor = v
			break
		}
	}
	ed := exec.CommandContext(cmd.Context(), "sh", "-c", editor+` "$1"`, "kiln-editor", path)
	ed.Stdin, ed.Stdout, ed.Stderr = a.stdin, a.stdout, a.stderr
	ed.Env = make([]string, 0, len(a.env))
	for k, v := range a.env {
		ed.Env = append(ed.Env, k+"="+v)
	}
	if err := ed.Run(); err != nil {
		return fmt.Errorf("editor %q: %w; cluster not changed", editor, err)
	}
	return nil
}

// statusOf is the HTTP status of an API error, 0 for any other error.
func statusOf(err error) int {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}
