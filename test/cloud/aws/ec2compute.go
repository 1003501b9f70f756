package aws

import (
	"context"
	"errors"
)

// STUB: owned by the EC2 compute helper; replace whole.

// ec2Compute is EC2's compute state.
type ec2Compute struct {
	Instances map[string]*instance `json:"instances"`
}

func newEC2Compute() *ec2Compute { return &ec2Compute{Instances: map[string]*instance{}} }

// instance is an EC2 instance.
type instance struct {
	ID        string `json:"id"`
	State     string `json:"state"` // pending, running, stopping, stopped, shutting-down, terminated
	PrivateIP string `json:"privateIp"`
	SubnetID  string `json:"subnetId"`
	VPCID     string `json:"vpcId"`
	Zone      string `json:"zone"`
	Region    string `json:"region"`
	Group     string `json:"group,omitempty"` // its Auto Scaling group
	// SecurityGroups are its security groups' ids.
	SecurityGroups []string `json:"securityGroups,omitempty"`
}

func (s *Server) ec2ComputeActions() map[string]queryAction { return map[string]queryAction{} }

func (s *Server) computeHas(id string) bool { _, ok := s.st.EC2.Compute.Instances[id]; return ok }

func (s *Server) instanceOf(id string) (*instance, bool) {
	i, ok := s.st.EC2.Compute.Instances[id]
	return i, ok
}

func (s *Server) launch(ctx context.Context, region string, spec launchSpec) (*instance, error) {
	return nil, errors.New("not yet")
}

func (s *Server) terminate(id string) error { return errors.New("not yet") }

func (s *Server) templateSpec(region, idOrName, version string) (launchSpec, error) {
	return launchSpec{}, errors.New("not yet")
}

// Interrupt gives a spot instance its interruption notice.
func (s *Server) Interrupt(id string) error { return errors.New("not yet") }

func (s *Server) computeLoop(ctx context.Context) {}
