package dynamic

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSProbeTimeout is how long a DNS server has to answer.
const DNSProbeTimeout = 2 * time.Second

// ProbeDNS asks server, over UDP, for the root's name servers and returns
// nil when an answer to that question comes back within timeout. Any
// answer counts, a refusal too: the check is that a resolver is there, not
// what it knows.
func ProbeDNS(ctx context.Context, server netip.AddrPort, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var idb [2]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return fmt.Errorf("query id: %w", err)
	}
	id := binary.BigEndian.Uint16(idb[:])
	q, err := (&dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("."), Type: dnsmessage.TypeNS, Class: dnsmessage.ClassINET}},
	}).Pack()
	if err != nil {
		return fmt.Errorf("build query: %w", err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", server.String())
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	if _, err := conn.Write(q); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				return fmt.Errorf("no answer within %s", timeout)
			}
			return err
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err == nil && h.ID == id && h.Response {
			return nil
		}
		// Not our answer (or not DNS): keep listening until the deadline.
	}
}
