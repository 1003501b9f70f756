// Package ntptest is an NTP server for tests: it answers client requests
// (RFC 5905, mode 3) as a stratum-2 server whose clock is this one's plus
// an offset. It is a test double: it keeps no time of its own.
package ntptest

import (
	"encoding/binary"
	"net"
	"strconv"
	"testing"
	"time"
)

// Serve answers NTP requests on a UDP address (host:port; port 0 picks
// one) until the test ends, and returns the port it listens on.
func Serve(t testing.TB, addr string, offset time.Duration) string {
	t.Helper()
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("ntptest: listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 128)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < 48 {
				continue
			}
			conn.WriteTo(answer(buf[40:48], time.Now().Add(offset)), from)
		}
	}()
	return strconv.Itoa(conn.LocalAddr().(*net.UDPAddr).Port)
}

// answer is a server's packet at now for a request whose transmit time
// was sent.
func answer(sent []byte, now time.Time) []byte {
	out := make([]byte, 48)
	out[0] = 0<<6 | 4<<3 | 4                   // no leap warning, version 4, mode server
	out[1] = 2                                 // stratum
	out[2] = 6                                 // poll interval 2^6 s
	out[3] = 0xEC                              // precision 2^-20 s
	binary.BigEndian.PutUint32(out[4:], 0x100) // root delay, 1/256 s
	binary.BigEndian.PutUint32(out[8:], 0x100) // root dispersion
	copy(out[12:16], []byte{127, 0, 0, 1})     // reference id
	stamp(out[16:], now.Add(-time.Second))     // reference time
	copy(out[24:32], sent)                     // origin: the client's transmit time
	stamp(out[32:], now)                       // receive
	stamp(out[40:], now)                       // transmit
	return out
}

// stamp writes t as an NTP timestamp: seconds since 1900, and a fraction.
func stamp(b []byte, t time.Time) {
	secs := uint64(t.Unix()) + 2208988800
	frac := uint64(t.Nanosecond()) << 32 / 1e9
	binary.BigEndian.PutUint64(b, secs<<32|frac)
}
