package provider

import (
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
)

// CheckTCP refuses, terminally (InvalidParameter), a Service load balancer
// with a port that lbs (the provider's load balancers, for the message:
// "the aws provider's network load balancers") cannot forward: one of
// another protocol than TCP, or one with no NodePort.
func (s ServiceLoadBalancer) CheckTCP(lbs string) error {
	for _, port := range s.Ports {
		if port.Protocol != "" && !strings.EqualFold(port.Protocol, "TCP") {
			return failure.Terminal(v1.CodeInvalidParameter, "Service %s: port %d is %s; %s forward TCP only", s.Service, port.Port, port.Protocol, lbs)
		}
		if port.NodePort == 0 {
			return failure.Terminal(v1.CodeInvalidParameter, "Service %s: port %d has no NodePort to forward to", s.Service, port.Port)
		}
	}
	return nil
}
