package store

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// sqlStater is a driver error that carries a SQLSTATE.
type sqlStater interface {
	error
	SQLState() string
}

// ErrUnavailable: the database could not be reached, or dropped the
// connection mid-statement. Nothing is known to have been written; the same
// request can succeed once the database is back. Unavailable matches it as
// well as the driver errors that mean the same.
var ErrUnavailable = errors.New("store unavailable")

// Unavailable reports whether err says the database is out of reach rather
// than that the statement failed: a connection refused or reset, a
// connection closed in the middle of a query (EOF), or a server that is
// shutting down, starting up or out of connections. It reads standard
// library types and the SQLState() convention of database drivers (pgx's
// *pgconn.PgError has it, and its *pgconn.ConnectError unwraps to the
// cause), so the store package needs no driver.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	if se, ok := errors.AsType[sqlStater](err); ok {
		code := se.SQLState()
		switch {
		case strings.HasPrefix(code, "08"): // connection_exception
			return true
		case code == "57P01", code == "57P02", code == "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return true
		case code == "53300": // too_many_connections
			return true
		}
	}
	return false
}
