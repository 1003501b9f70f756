// Package pgtest gives tests their own PostgreSQL database on the server
// named by KILN_TEST_POSTGRES (scripts/postgres.sh starts one), or skips them
// with a message saying so.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// ServerURL is the test server from KILN_TEST_POSTGRES, or a skip.
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("KILN_TEST_POSTGRES")
	if u == "" {
		t.Skip("KILN_TEST_POSTGRES not set: PostgreSQL half skipped (run scripts/postgres.sh start)")
	}
	return u
}

// FreshDB creates an empty database on the test server, drops it at
// cleanup, and returns its URL.
func FreshDB(t testing.TB) string {
	t.Helper()
	base := ServerURL(t)
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "kiln_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("KILN_TEST_POSTGRES: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
