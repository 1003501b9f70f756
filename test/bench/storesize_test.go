package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"sort"
	"strings"

	_ "modernc.org/sqlite" // the store kilnd wrote, read beside it
)

// tableSize is what one table of kilnd's SQLite store holds: its rows,
// and the bytes of its pages and of its indexes' pages.
type tableSize struct {
	Table string
	Rows  int64
	Bytes int64
}

// storeSize reads kilnd's SQLite store at path, read-only while kilnd runs
// (WAL): each table's rows and bytes (SQLite's dbstat, the table's pages
// and its indexes'), largest first.
func storeSize(ctx context.Context, path string) ([]tableSize, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&"+url.Values{"_pragma": {"busy_timeout(10000)"}}.Encode())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT m.tbl_name, SUM(d.pgsize) FROM dbstat d
		JOIN sqlite_schema m ON m.name = d.name
		WHERE m.tbl_name NOT LIKE 'sqlite_%' AND m.tbl_name <> 'goose_db_version'
		GROUP BY m.tbl_name`)
	if err != nil {
		return nil, fmt.Errorf("dbstat: %w", err)
	}
	var out []tableSize
	for rows.Next() {
		var t tableSize
		if err := rows.Scan(&t.Table, &t.Bytes); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		// The names come from the store's own schema.
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM "`+out[i].Table+`"`).Scan(&out[i].Rows); err != nil {
			return nil, fmt.Errorf("count %s: %w", out[i].Table, err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bytes > out[j].Bytes })
	return out, nil
}

// perCluster renders sizes divided among n clusters: a line per table with
// rows, rows per cluster and bytes per cluster, and the total.
func perCluster(sizes []tableSize, n int) (text string, bytesPerCluster float64) {
	var b strings.Builder
	var total int64
	fmt.Fprintf(&b, "%-18s %10s %12s %14s\n", "table", "rows", "rows/cluster", "bytes/cluster")
	for _, t := range sizes {
		if t.Rows == 0 {
			continue
		}
		total += t.Bytes
		fmt.Fprintf(&b, "%-18s %10d %12.2f %14.0f\n", t.Table, t.Rows, float64(t.Rows)/float64(n), float64(t.Bytes)/float64(n))
	}
	bytesPerCluster = float64(total) / float64(n)
	fmt.Fprintf(&b, "%-18s %10s %12s %14.0f\n", "all", "", "", bytesPerCluster)
	return b.String(), bytesPerCluster
}
