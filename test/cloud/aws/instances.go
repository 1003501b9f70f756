package aws

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"
)

// Instances' describe, stop, start and terminate, and spot interruptions.

// regionInstance returns an instance of the region that Describe calls
// see, or EC2's NotFound. Callers hold s.mu.
func (s *Server) regionInstance(region, id string) (*instance, error) {
	i, ok := s.instanceOf(id)
	if !ok || i.Region != region || !s.visible(i.LaunchTime) {
		return nil, notFound(id)
	}
	return i, nil
}

// instanceField is the value of a DescribeInstances filter.
func (s *Server) instanceField(i *instance, name string) ([]string, bool) {
	switch name {
	case "instance-state-name":
		return []string{i.State}, true
	case "instance-state-code":
		return []string{strconv.Itoa(stateCodes[i.State])}, true
	case "instance-id":
		return []string{i.ID}, true
	case "reservation-id":
		return []string{i.Reservation}, true
	case "subnet-id":
		return []string{i.SubnetID}, true
	case "vpc-id":
		return []string{i.VPCID}, true
	case "availability-zone":
		return []string{i.Zone}, true
	case "instance-type":
		return []string{i.InstanceType}, true
	case "image-id":
		return []string{i.ImageID}, true
	case "key-name":
		return []string{i.KeyName}, true
	case "private-ip-address", "network-interface.addresses.private-ip-address":
		return []string{i.PrivateIP}, true
	case "private-dns-name":
		return []string{i.privateDNSName()}, true
	case "instance-lifecycle":
		if i.Spot {
			return []string{"spot"}, true
		}
		return nil, true
	case "spot-instance-request-id":
		return []string{i.SpotRequest}, true
	case "instance.group-id", "group-id":
		return i.SecurityGroups, true
	case "state-reason-code":
		if i.Reason != nil {
			return []string{i.Reason.Code}, true
		}
		return nil, true
	}
	return nil, false
}

// describedInstances are the instances a Describe call names (all of the
// region's that it sees when none), in launch order. Callers hold s.mu.
func (s *Server) describedInstances(c *call) ([]*instance, error) {
	var out []*instance
	if ids := c.p.List("InstanceId"); len(ids) > 0 {
		for _, id := range ids {
			i, err := s.regionInstance(c.region, id)
			if err != nil {
				return nil, err
			}
			out = append(out, i)
		}
		return out, nil
	}
	for _, i := range s.st.EC2.Compute.Instances {
		if i.Region == c.region && s.visible(i.LaunchTime) {
			out = append(out, i)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].LaunchTime.Equal(out[b].LaunchTime) {
			return out[a].LaunchTime.Before(out[b].LaunchTime)
		}
		return out[a].ID < out[b].ID
	})
	return out, nil
}

func (s *Server) describeInstances(c *call) (any, error) {
	is, err := s.describedInstances(c)
	if err != nil {
		return nil, err
	}
	fs := filters(c.p)
	var out struct {
		Reservations []reservationXML `xml:"reservationSet>item"`
	}
	byID := map[string]int{}
	for _, i := range is {
		ok, err := s.matches(i.ID, fs, func(name string) ([]string, bool) { return s.instanceField(i, name) })
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		n, seen := byID[i.Reservation]
		if !seen {
			n = len(out.Reservations)
			byID[i.Reservation] = n
			out.Reservations = append(out.Reservations, reservationXML{ReservationID: i.Reservation, OwnerID: c.account()})
		}
		r := &out.Reservations[n]
		r.Instances = append(r.Instances, s.instanceXMLOf(i, len(r.Instances)))
	}
	return out, nil
}

func (s *Server) describeInstanceStatus(c *call) (any, error) {
	is, err := s.describedInstances(c)
	if err != nil {
		return nil, err
	}
	type status struct {
		Status string `xml:"status"`
	}
	type item struct {
		InstanceID     string           `xml:"instanceId"`
		Zone           string           `xml:"availabilityZone"`
		State          instanceStateXML `xml:"instanceState"`
		SystemStatus   status           `xml:"systemStatus"`
		InstanceStatus status           `xml:"instanceStatus"`
	}
	var out struct {
		Items []item `xml:"instanceStatusSet>item"`
	}
	all := c.p.Bool("IncludeAllInstances")
	for _, i := range is {
		if i.State != "running" && !all {
			continue
		}
		st := "not-applicable"
		if i.State == "running" {
			st = "ok"
		}
		out.Items = append(out.Items, item{InstanceID: i.ID, Zone: i.Zone,
			State: instanceStateXML{Code: stateCodes[i.State], Name: i.State}, SystemStatus: status{st}, InstanceStatus: status{st}})
	}
	return out, nil
}

// stateChangeXML is an item of Terminate/Stop/StartInstances' answers.
type stateChangeXML struct {
	InstanceID string           `xml:"instanceId"`
	Current    instanceStateXML `xml:"currentState"`
	Previous   instanceStateXML `xml:"previousState"`
}

// changeStates applies change to every instance the call names (all must
// be the caller's), answering each one's state before and after.
func (s *Server) changeStates(c *call, change func(i *instance) error) (any, error) {
	ids := c.p.List("InstanceId")
	if len(ids) == 0 {
		return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter InstanceId")
	}
	var is []*instance
	for _, id := range ids {
		i, ok := s.instanceOf(id)
		if !ok || i.Region != c.region {
			return nil, notFound(id)
		}
		is = append(is, i)
	}
	var out struct {
		Items []stateChangeXML `xml:"instancesSet>item"`
	}
	for _, i := range is {
		before := i.State
		if err := change(i); err != nil {
			return nil, err
		}
		out.Items = append(out.Items, stateChangeXML{InstanceID: i.ID,
			Current:  instanceStateXML{Code: stateCodes[i.State], Name: i.State},
			Previous: instanceStateXML{Code: stateCodes[before], Name: before}})
	}
	return out, nil
}

func (s *Server) terminateInstances(c *call) (any, error) {
	return s.changeStates(c, func(i *instance) error {
		s.shutDown(i, &stateReason{Code: "Client.UserInitiatedShutdown", Message: "Client.UserInitiatedShutdown: User initiated shutdown"})
		return nil
	})
}

// shutDown starts terminating an instance (computeLoop removes its machine
// and ends it terminated). Callers hold s.mu.
func (s *Server) shutDown(i *instance, reason *stateReason) {
	if i.State == "terminated" || i.State == "shutting-down" {
		return
	}
	s.log.Info("terminating instance", "instance", i.ID, "reason", reason.Code)
	s.setState(i, "shutting-down", reason)
}

// terminate terminates an instance (Auto Scaling's scale-in). Callers
// hold s.mu.
func (s *Server) terminate(id string) error {
	i, ok := s.instanceOf(id)
	if !ok {
		return notFound(id)
	}
	s.shutDown(i, &stateReason{Code: "Client.UserInitiatedShutdown", Message: "Client.UserInitiatedShutdown: User initiated shutdown"})
	return nil
}

func (s *Server) stopInstances(c *call) (any, error) {
	return s.changeStates(c, func(i *instance) error {
		switch {
		case i.Spot:
			return errorf(http.StatusBadRequest, "UnsupportedOperation", "You can't stop the Spot Instance '%s' because it is associated with a one-time Spot Instance request. You can only stop Spot Instances associated with persistent Spot Instance requests.", i.ID)
		case i.State == "terminated" || i.State == "shutting-down":
			return errorf(http.StatusBadRequest, "IncorrectInstanceState", "This instance '%s' is not in a state from which it can be stopped.", i.ID)
		case i.State == "pending" || i.State == "running":
			s.log.Info("stopping instance", "instance", i.ID)
			s.setState(i, "stopping", &stateReason{Code: "Client.UserInitiatedShutdown", Message: "Client.UserInitiatedShutdown: User initiated shutdown"})
		}
		return nil
	})
}

func (s *Server) startInstances(c *call) (any, error) {
	return s.changeStates(c, func(i *instance) error {
		switch i.State {
		case "stopped":
		case "pending", "running":
			return nil
		default:
			return errorf(http.StatusBadRequest, "IncorrectInstanceState", "The instance '%s' is not in a state from which it can be started.", i.ID)
		}
		v, _, _ := instanceTypeOf(i.InstanceType)
		if q := s.vcpuQuota(); s.liveVCPUs(i.Region)+v > q {
			return errorf(http.StatusBadRequest, "VcpuLimitExceeded", "You have requested more vCPU capacity than your current vCPU limit of %d allows for the instance bucket that the specified instance type belongs to.", q)
		}
		if s.noCapacity(i.InstanceType, i.Zone) {
			return errorf(http.StatusInternalServerError, "InsufficientInstanceCapacity", "We currently do not have sufficient %s capacity in the Availability Zone you requested (%s).", i.InstanceType, i.Zone)
		}
		s.log.Info("starting instance", "instance", i.ID)
		s.setState(i, "pending", nil)
		i.Reason = nil
		return nil
	})
}

// Interrupt gives a spot instance its interruption notice: it is
// terminated Faults.SpotNotice later (2 minutes unless set), with
// stateReason Server.SpotInstanceTermination. The admin API calls it.
func (s *Server) Interrupt(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.instanceOf(id)
	switch {
	case !ok:
		return fmt.Errorf("interrupt: no instance %q", id)
	case !i.Spot:
		return fmt.Errorf("interrupt: instance %s is not a spot instance", id)
	case !i.live():
		return fmt.Errorf("interrupt: instance %s is %s", id, i.State)
	case i.InterruptAt != nil:
		return nil
	}
	notice := time.Duration(s.faults.SpotNotice)
	if notice <= 0 {
		notice = 2 * time.Minute
	}
	at := s.opts.Now().Add(notice)
	i.InterruptAt = &at
	s.log.Info("spot interruption notice", "instance", id, "terminateAt", at)
	return s.save()
}

// interruptDue terminates the spot instances whose notice has run out.
// Callers hold s.mu.
func (s *Server) interruptDue() bool {
	changed := false
	now := s.opts.Now()
	for _, i := range s.st.EC2.Compute.Instances {
		if i.InterruptAt != nil && !now.Before(*i.InterruptAt) && i.State != "terminated" && i.State != "shutting-down" {
			s.shutDown(i, &stateReason{Code: "Server.SpotInstanceTermination", Message: "Server.SpotInstanceTermination: Spot instance termination"})
			changed = true
		}
	}
	return changed
}

// forgetTerminated drops instances terminated longer than terminatedKept
// ago, as AWS stops describing them. Callers hold s.mu.
func (s *Server) forgetTerminated() bool {
	changed := false
	for id, i := range s.st.EC2.Compute.Instances {
		if i.State == "terminated" && s.opts.Now().Sub(i.Changed) > terminatedKept {
			delete(s.st.EC2.Compute.Instances, id)
			delete(s.st.EC2.Tags, id)
			changed = true
		}
	}
	return changed
}
