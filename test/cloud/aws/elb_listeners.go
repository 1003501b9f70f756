package aws

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// listener is a TCP listener of a network load balancer, forwarding to one
// target group.
type listener struct {
	ARN             string    `json:"arn"`
	LoadBalancerARN string    `json:"loadBalancerArn"`
	Protocol        string    `json:"protocol"`
	Port            int       `json:"port"`
	TargetGroupARN  string    `json:"targetGroupArn"`
	Created         time.Time `json:"created"`
}

func listenerNotFound(what string) error {
	return errorf(http.StatusBadRequest, "ListenerNotFound", "One or more listeners not found: %s", what)
}

// forwardTarget is the target group of DefaultActions.member.1: a forward
// action's TargetGroupArn, or its ForwardConfig's one target group.
func forwardTarget(p params) (string, error) {
	actions := p.Structs("DefaultActions.member")
	if len(actions) != 1 {
		return "", validationError("A listener of the local AWS has exactly one default action (forward), not %d", len(actions))
	}
	a := actions[0]
	if a.Get("Type") != "forward" {
		return "", errorf(http.StatusBadRequest, "InvalidLoadBalancerAction", "Action type '%s' is not supported by a network load balancer: forward", a.Get("Type"))
	}
	arn := a.Get("TargetGroupArn")
	if groups := a.Structs("ForwardConfig.TargetGroups.member"); arn == "" && len(groups) == 1 {
		arn = groups[0].Get("TargetGroupArn")
	}
	if arn == "" {
		return "", validationError("A forward action needs one TargetGroupArn")
	}
	return arn, nil
}

func (s *Server) createListener(c *call) (any, error) {
	lbARN, err := c.p.Required("LoadBalancerArn")
	if err != nil {
		return nil, err
	}
	e := s.elb()
	lb, ok := e.LoadBalancers[lbARN]
	if !ok {
		return nil, lbNotFound("'" + lbARN + "'")
	}
	li := &listener{LoadBalancerARN: lbARN, Protocol: c.p.Get("Protocol"), Created: s.opts.Now().UTC()}
	if li.Protocol != "TCP" {
		return nil, errorf(http.StatusBadRequest, "UnsupportedProtocol", "Protocol '%s' is not supported by the local AWS's listeners: TCP only", li.Protocol)
	}
	if li.Port, err = c.p.Int("Port", 0); err != nil {
		return nil, err
	}
	if li.Port < 1 || li.Port > 65535 {
		return nil, validationError("A listener needs a Port between 1 and 65535")
	}
	if li.TargetGroupARN, err = forwardTarget(c.p); err != nil {
		return nil, err
	}
	tg, ok := e.TargetGroups[li.TargetGroupARN]
	if !ok {
		return nil, tgNotFound("'" + li.TargetGroupARN + "'")
	}
	if tg.VPCID != lb.VPCID {
		return nil, validationError("Target group '%s' is in VPC %s, not in the load balancer's VPC %s", tg.ARN, tg.VPCID, lb.VPCID)
	}
	for _, other := range s.tgLoadBalancers(tg.ARN) {
		if other != lbARN {
			return nil, errorf(http.StatusBadRequest, "TargetGroupAssociationLimit", "The target group '%s' is already used by load balancer '%s'; a network load balancer's target group serves one load balancer", tg.ARN, other)
		}
	}
	for _, old := range e.Listeners {
		if old.LoadBalancerARN != lbARN || old.Port != li.Port {
			continue
		}
		// CreateListener is idempotent: the same settings answer the
		// listener there is.
		if old.Protocol != li.Protocol || old.TargetGroupARN != li.TargetGroupARN {
			return nil, errorf(http.StatusBadRequest, "DuplicateListener", "A listener already exists on port %d of load balancer '%s'", li.Port, lbARN)
		}
		return listenerList{[]listenerOut{listenerOf(old)}}, nil
	}
	_, id, _ := strings.Cut(lbARN, ":loadbalancer/") // net/NAME/HEX
	li.ARN = c.elbARN("listener/" + id + "/" + hex16())
	e.Listeners[li.ARN] = li
	if tags := c.p.Tags("Tags.member"); len(tags) > 0 {
		e.Tags[li.ARN] = tags
	}
	s.wakeELB()
	return listenerList{[]listenerOut{listenerOf(li)}}, nil
}

// listenerOut is a Listener in an answer.
type listenerOut struct {
	ListenerArn     string
	LoadBalancerArn string
	Port            int
	Protocol        string
	DefaultActions  []actionOut `xml:"DefaultActions>member"`
}

type actionOut struct {
	Type           string
	TargetGroupArn string
	Order          int
	ForwardConfig  struct {
		TargetGroups []struct {
			TargetGroupArn string
			Weight         int
		} `xml:"TargetGroups>member"`
	}
}

type listenerList struct {
	Listeners []listenerOut `xml:"Listeners>member"`
}

func listenerOf(l *listener) listenerOut {
	a := actionOut{Type: "forward", TargetGroupArn: l.TargetGroupARN, Order: 1}
	a.ForwardConfig.TargetGroups = append(a.ForwardConfig.TargetGroups, struct {
		TargetGroupArn string
		Weight         int
	}{l.TargetGroupARN, 1})
	return listenerOut{ListenerArn: l.ARN, LoadBalancerArn: l.LoadBalancerARN, Port: l.Port, Protocol: l.Protocol, DefaultActions: []actionOut{a}}
}

func (s *Server) describeListeners(c *call) (any, error) {
	lbARN, arns := c.p.Get("LoadBalancerArn"), c.p.List("ListenerArns.member")
	e := s.elb()
	var out listenerList
	switch {
	case len(arns) > 0:
		for _, arn := range arns {
			l, ok := e.Listeners[arn]
			if !ok {
				return nil, listenerNotFound("'" + arn + "'")
			}
			out.Listeners = append(out.Listeners, listenerOf(l))
		}
	case lbARN != "":
		if _, ok := e.LoadBalancers[lbARN]; !ok {
			return nil, lbNotFound("'" + lbARN + "'")
		}
		for _, l := range e.Listeners {
			if l.LoadBalancerARN == lbARN {
				out.Listeners = append(out.Listeners, listenerOf(l))
			}
		}
		slices.SortFunc(out.Listeners, func(a, b listenerOut) int { return a.Port - b.Port })
	default:
		return nil, validationError("You must specify either listener ARNs or a load balancer ARN")
	}
	return out, nil
}

func (s *Server) deleteListener(c *call) (any, error) {
	arn, err := c.p.Required("ListenerArn")
	if err != nil {
		return nil, err
	}
	if _, ok := s.elb().Listeners[arn]; !ok {
		return nil, listenerNotFound("'" + arn + "'")
	}
	s.removeListener(arn)
	return nil, nil
}

// removeListener deletes a listener and stops its proxy. Callers hold
// s.mu.
func (s *Server) removeListener(arn string) {
	e := s.elb()
	delete(e.Listeners, arn)
	delete(e.Tags, arn)
	delete(e.rt.bindErr, arn)
	if p, ok := e.rt.proxies[arn]; ok {
		p.Close()
		delete(e.rt.proxies, arn)
		s.log.Info("stopped load balancer listener", "listener", arn, "address", p.Addr())
	}
}

// elbResource checks that arn is a load balancer, target group or listener
// of the state, answering the NotFound error of its kind.
func (s *Server) elbResource(arn string) error {
	e := s.elb()
	switch {
	case strings.Contains(arn, ":loadbalancer/"):
		if _, ok := e.LoadBalancers[arn]; !ok {
			return lbNotFound("'" + arn + "'")
		}
	case strings.Contains(arn, ":targetgroup/"):
		if _, ok := e.TargetGroups[arn]; !ok {
			return tgNotFound("'" + arn + "'")
		}
	case strings.Contains(arn, ":listener/"):
		if _, ok := e.Listeners[arn]; !ok {
			return listenerNotFound("'" + arn + "'")
		}
	default:
		return validationError("'%s' is not the ARN of a load balancer, target group or listener", arn)
	}
	return nil
}

func (s *Server) addTags(c *call) (any, error) {
	arns, tags := c.p.List("ResourceArns.member"), c.p.Tags("Tags.member")
	if len(arns) == 0 || len(tags) == 0 {
		return nil, validationError("ResourceArns and Tags must be given")
	}
	for _, arn := range arns {
		if err := s.elbResource(arn); err != nil {
			return nil, err
		}
	}
	for _, arn := range arns {
		t := s.elb().Tags[arn]
		if t == nil {
			t = map[string]string{}
			s.elb().Tags[arn] = t
		}
		for k, v := range tags {
			t[k] = v
		}
	}
	return nil, nil
}

func (s *Server) removeTags(c *call) (any, error) {
	arns, keys := c.p.List("ResourceArns.member"), c.p.List("TagKeys.member")
	for _, arn := range arns {
		if err := s.elbResource(arn); err != nil {
			return nil, err
		}
	}
	for _, arn := range arns {
		for _, k := range keys {
			delete(s.elb().Tags[arn], k)
		}
	}
	return nil, nil
}

type tagOut struct {
	Key   string
	Value string
}

func (s *Server) describeELBTags(c *call) (any, error) {
	type description struct {
		ResourceArn string
		Tags        []tagOut `xml:"Tags>member"`
	}
	var out struct {
		TagDescriptions []description `xml:"TagDescriptions>member"`
	}
	arns := c.p.List("ResourceArns.member")
	if len(arns) == 0 || len(arns) > 20 {
		return nil, validationError("ResourceArns must name 1 to 20 resources")
	}
	for _, arn := range arns {
		if err := s.elbResource(arn); err != nil {
			return nil, err
		}
		d := description{ResourceArn: arn, Tags: []tagOut{}}
		for k, v := range s.elb().Tags[arn] {
			d.Tags = append(d.Tags, tagOut{Key: k, Value: v})
		}
		slices.SortFunc(d.Tags, func(a, b tagOut) int { return strings.Compare(a.Key, b.Key) })
		out.TagDescriptions = append(out.TagDescriptions, d)
	}
	return out, nil
}
