package cli

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// listing is what a list command's --selector and --sort know of its
// items: named fields (the first is the default order and breaks ties) and,
// where the items have them, labels. Every list takes both flags
// (TestEveryListSelectsAndSorts).
type listing[T any] struct {
	what   string // the items, in help ("clusters")
	fields []field[T]
	// labels are an item's labels: a --selector key that names no field
	// is a label's. Nil when the items have none.
	labels func(T) map[string]string

	selector, sortBy string
}

// field is one thing --selector and --sort know of an item.
type field[T any] struct {
	name string
	of   func(T) string
	// desc sorts the largest first: for a time (stamp), the newest.
	desc bool
	// sortOnly: --selector does not take it (a time).
	sortOnly bool
}

// stamp is a time as a field: fixed width, so the strings sort as the
// times do; the zero time first.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000000")
}

// stampOf is stamp of a time that may be missing.
func stampOf(t *time.Time) string {
	if t == nil {
		return ""
	}
	return stamp(*t)
}

// add gives cmd the --selector (-l) and --sort flags.
func (l *listing[T]) add(cmd *cobra.Command) {
	sel := "only " + l.what + " with every KEY=VALUE given (comma-separated); KEY one of " + strings.Join(l.names(false), ", ")
	if l.labels != nil {
		sel += ", or a label's key"
	}
	cmd.Flags().StringVarP(&l.selector, "selector", "l", "", sel)
	cmd.Flags().StringVar(&l.sortBy, "sort", l.fields[0].name, "order: "+l.sortHelp())
}

// names are the fields' names; those --selector takes unless sorting.
func (l *listing[T]) names(sorting bool) []string {
	var out []string
	for _, f := range l.fields {
		if sorting || !f.sortOnly {
			out = append(out, f.name)
		}
	}
	return out
}

func (l *listing[T]) sortHelp() string {
	var out []string
	for _, f := range l.fields {
		if f.desc {
			out = append(out, f.name+" (newest first)")
		} else {
			out = append(out, f.name)
		}
	}
	return strings.Join(out, ", ")
}

func (l *listing[T]) field(name string) *field[T] {
	for i := range l.fields {
		if l.fields[i].name == name {
			return &l.fields[i]
		}
	}
	return nil
}

// apply keeps the items the selector picks, in the order --sort asks, then
// by the first field. A key or order the list does not know is a usage
// error naming the flag and what it takes.
func (l *listing[T]) apply(items []T) ([]T, error) {
	by := l.field(l.sortBy)
	if by == nil {
		return nil, usageError{err: fmt.Errorf("--sort %q: sort by one of %s", l.sortBy, strings.Join(l.names(true), ", ")), arg: "--sort"}
	}
	want, err := parseSelector(l.selector)
	if err != nil {
		return nil, err
	}
	for k := range want {
		if f := l.field(k); (f == nil && l.labels == nil) || (f != nil && f.sortOnly) {
			return nil, usageError{err: fmt.Errorf("--selector %q: %s are selected by %s", k, l.what, strings.Join(l.names(false), ", ")), arg: "--selector"}
		}
	}
	items = slices.DeleteFunc(slices.Clone(items), func(it T) bool {
		for k, v := range want {
			if f := l.field(k); f != nil {
				if !strings.EqualFold(f.of(it), v) {
					return true
				}
			} else if got, ok := l.labels(it)[k]; !ok || got != v {
				return true
			}
		}
		return false
	})
	first := l.fields[0]
	slices.SortStableFunc(items, func(x, y T) int {
		c := strings.Compare(by.of(x), by.of(y))
		if by.desc {
			c = -c
		}
		return cmp.Or(c, strings.Compare(first.of(x), first.of(y)))
	})
	return items, nil
}

// parseSelector reads K=V[,K=V...]; "" selects everything.
func parseSelector(s string) (map[string]string, error) {
	out := map[string]string{}
	for kv := range strings.SplitSeq(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{err: fmt.Errorf("--selector %q: each part is KEY=VALUE", s), arg: "--selector"}
		}
		out[k] = v
	}
	return out, nil
}
