package aws

// STUB: owned by the EC2 networking helper; replace whole.

// ec2Net is EC2's networking state.
type ec2Net struct {
	Subnets map[string]*subnet `json:"subnets"`
}

func newEC2Net() *ec2Net { return &ec2Net{Subnets: map[string]*subnet{}} }

// subnet is a subnet of a VPC in one zone.
type subnet struct {
	ID     string `json:"id"`
	VPCID  string `json:"vpcId"`
	CIDR   string `json:"cidr"`
	Zone   string `json:"zone"`
	Region string `json:"region"`
}

func (s *Server) ec2NetActions() map[string]queryAction { return map[string]queryAction{} }

// netHas reports whether id is a networking resource. Callers hold s.mu.
func (s *Server) netHas(id string) bool { _, ok := s.st.EC2.Net.Subnets[id]; return ok }

// subnetOf returns the subnet id. Callers hold s.mu.
func (s *Server) subnetOf(id string) (*subnet, bool) { n, ok := s.st.EC2.Net.Subnets[id]; return n, ok }
