package cli

import (
	"context"
	"io"
	"time"

	"github.com/spf13/cobra"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// resource is how the CLI lists and shows one kind of a project's
// resources (cloud accounts, secrets): the client's calls, what the server
// never sends, cleared again to be sure, and the table of many.
type resource[T any] struct {
	list   func(*client.Client, context.Context, string) ([]T, error)
	get    func(*client.Client, context.Context, string, string) (*T, error)
	hide   func(*T)
	render func(w io.Writer, items []T, now time.Time) error
	// what and fields are what list's --selector and --sort know.
	what   string
	fields []field[T]
}

// help is a command's texts.
type help struct{ short, long, example string }

// listCommand is "list" (alias ls) of r's resources in the project.
func listCommand[T any](a *app, r resource[T], h help) *cobra.Command {
	l := &listing[T]{what: r.what, fields: r.fields}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   h.short,
		Long:    h.long,
		Example: h.example,
		Args:    exactArgs(),
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			items, err := r.list(c, cmd.Context(), s.Project)
			if err != nil {
				return err
			}
			if items, err = l.apply(items); err != nil {
				return err
			}
			for i := range items {
				r.hide(&items[i])
			}
			return a.emit(v1.List[T]{Value: items}, func(w io.Writer) error { return r.render(w, items, a.now()) })
		}),
	}
	l.add(cmd)
	return cmd
}

// getCommand is "get NAME" of one of r's resources in the project.
func getCommand[T any](a *app, r resource[T], h help) *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Short:   h.short,
		Long:    h.long,
		Example: h.example,
		Args:    exactArgs("NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			item, err := r.get(c, cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			return printResource(a, r, item)
		}),
	}
}

// printResource prints one of r's resources, as get does.
func printResource[T any](a *app, r resource[T], item *T) error {
	r.hide(item)
	return a.emit(item, func(w io.Writer) error { return r.render(w, []T{*item}, a.now()) })
}
