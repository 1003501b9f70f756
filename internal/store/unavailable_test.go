package store_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"kiln.dev/kiln/internal/store"
)

// sqlStateError is a driver error with a SQLSTATE, as pgx's *pgconn.PgError.
type sqlStateError string

func (e sqlStateError) Error() string    { return "sqlstate " + string(e) }
func (e sqlStateError) SQLState() string { return string(e) }

func TestUnavailable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connect: %w", syscall.ECONNREFUSED)}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "nil", err: nil, want: false},
		{name: "sentinel", err: fmt.Errorf("get cluster: %w", store.ErrUnavailable), want: true},
		{name: "connection refused", err: fmt.Errorf("begin: failed to connect: %w", refused), want: true},
		{name: "bad connection", err: fmt.Errorf("query: %w", driver.ErrBadConn), want: true},
		{name: "EOF mid-query", err: fmt.Errorf("commit: %w", io.EOF), want: true},
		{name: "unexpected EOF", err: fmt.Errorf("query: %w", io.ErrUnexpectedEOF), want: true},
		{name: "admin shutdown", err: fmt.Errorf("query: %w", sqlStateError("57P01")), want: true},
		{name: "crash shutdown", err: sqlStateError("57P02"), want: true},
		{name: "starting up", err: sqlStateError("57P03"), want: true},
		{name: "connection failure", err: sqlStateError("08006"), want: true},
		{name: "too many connections", err: sqlStateError("53300"), want: true},
		{name: "unique violation", err: sqlStateError("23505"), want: false},
		{name: "not found", err: store.ErrNotFound, want: false},
		{name: "canceled", err: context.Canceled, want: false},
		{name: "other", err: errors.New("boom"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := store.Unavailable(tt.err); got != tt.want {
				t.Errorf("Unavailable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
