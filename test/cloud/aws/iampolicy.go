package aws

import (
	"net/http"
	"slices"
	"sort"
	"strings"
)

// A role's policies (inline and managed) and instance profiles.

func (s *Server) putRolePolicy(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	name, err := nameParam(c.p, "PolicyName")
	if err != nil {
		return nil, err
	}
	doc, err := policyParam(c.p, "PolicyDocument")
	if err != nil {
		return nil, err
	}
	if r.Inline == nil {
		r.Inline = map[string]string{}
	}
	r.Inline[name] = doc
	return nil, nil
}

func (s *Server) getRolePolicy(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	name := c.p.Get("PolicyName")
	doc, ok := r.Inline[name]
	if !ok {
		return nil, noSuchEntity("The role policy with name %s cannot be found.", name)
	}
	return struct {
		RoleName   string `xml:"RoleName"`
		PolicyName string `xml:"PolicyName"`
		Document   string `xml:"PolicyDocument"`
	}{r.Name, name, encodePolicy(doc)}, nil
}

func (s *Server) deleteRolePolicy(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	name := c.p.Get("PolicyName")
	if _, ok := r.Inline[name]; !ok {
		return nil, noSuchEntity("The role policy with name %s cannot be found.", name)
	}
	delete(r.Inline, name)
	return nil, nil
}

func (s *Server) listRolePolicies(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	out := struct {
		Names       []string `xml:"PolicyNames>member"`
		IsTruncated bool     `xml:"IsTruncated"`
	}{Names: []string{}}
	for n := range r.Inline {
		out.Names = append(out.Names, n)
	}
	sort.Strings(out.Names)
	return out, nil
}

// managedPolicy checks a managed policy ARN: AWS's managed policies
// (arn:aws:iam::aws:policy/...) are all taken as there; the local AWS has
// no customer managed policies.
func (s *Server) managedPolicy(c *call) (string, error) {
	arn, err := c.p.Required("PolicyArn")
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(arn, "arn:aws:iam::") || !strings.Contains(arn, ":policy/") {
		return "", errorf(http.StatusBadRequest, "InvalidInput", "ARN %s is not valid.", arn)
	}
	if !strings.HasPrefix(arn, "arn:aws:iam::aws:policy/") {
		return "", noSuchEntity("Policy %s does not exist or is not attachable.", arn)
	}
	return arn, nil
}

func (s *Server) attachRolePolicy(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	arn, err := s.managedPolicy(c)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(r.Attached, arn) {
		r.Attached = append(r.Attached, arn)
	}
	return nil, nil
}

func (s *Server) detachRolePolicy(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	arn := c.p.Get("PolicyArn")
	if !slices.Contains(r.Attached, arn) {
		return nil, noSuchEntity("Policy %s was not found.", arn)
	}
	r.Attached = deleteFunc(r.Attached, func(a string) bool { return a == arn })
	return nil, nil
}

func (s *Server) listAttachedRolePolicies(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	type attached struct {
		Name string `xml:"PolicyName"`
		Arn  string `xml:"PolicyArn"`
	}
	out := struct {
		Policies    []attached `xml:"AttachedPolicies>member"`
		IsTruncated bool       `xml:"IsTruncated"`
	}{Policies: []attached{}}
	for _, arn := range r.Attached {
		out.Policies = append(out.Policies, attached{arn[strings.LastIndex(arn, "/")+1:], arn})
	}
	return out, nil
}

type xmlInstanceProfile struct {
	Path       string    `xml:"Path"`
	Name       string    `xml:"InstanceProfileName"`
	ID         string    `xml:"InstanceProfileId"`
	Arn        string    `xml:"Arn"`
	CreateDate string    `xml:"CreateDate"`
	Roles      []xmlRole `xml:"Roles>member"`
	Tags       []xmlTag  `xml:"Tags>member,omitempty"`
}

func (s *Server) profileXML(p *instanceProfile) xmlInstanceProfile {
	x := xmlInstanceProfile{Path: p.Path, Name: p.Name, ID: p.ID, Arn: "arn:aws:iam::" + s.opts.AccountID + ":instance-profile" + p.Path + p.Name,
		CreateDate: awsTime(p.Created), Roles: []xmlRole{}, Tags: tagList(p.Tags)}
	for _, name := range p.Roles {
		if r := s.iam().Roles[strings.ToLower(name)]; r != nil {
			x.Roles = append(x.Roles, s.roleXML(r))
		}
	}
	return x
}

// profileParam is the instance profile InstanceProfileName names.
func (s *Server) profileParam(c *call) (*instanceProfile, error) {
	name, err := nameParam(c.p, "InstanceProfileName")
	if err != nil {
		return nil, err
	}
	p := s.iam().Profiles[strings.ToLower(name)]
	if p == nil {
		return nil, noSuchEntity("Instance Profile %s cannot be found.", name)
	}
	return p, nil
}

func (s *Server) createInstanceProfile(c *call) (any, error) {
	name, err := nameParam(c.p, "InstanceProfileName")
	if err != nil {
		return nil, err
	}
	path, err := pathParam(c.p)
	if err != nil {
		return nil, err
	}
	if s.iam().Profiles[strings.ToLower(name)] != nil {
		return nil, errorf(http.StatusConflict, "EntityAlreadyExists", "Instance Profile %s already exists.", name)
	}
	p := &instanceProfile{Name: name, ID: iamID("AIPA"), Path: path, Tags: c.p.Tags("Tags.member"), Created: s.opts.Now()}
	s.iam().Profiles[strings.ToLower(name)] = p
	return struct {
		Profile xmlInstanceProfile `xml:"InstanceProfile"`
	}{s.profileXML(p)}, nil
}

func (s *Server) getInstanceProfile(c *call) (any, error) {
	p, err := s.profileParam(c)
	if err != nil {
		return nil, err
	}
	return struct {
		Profile xmlInstanceProfile `xml:"InstanceProfile"`
	}{s.profileXML(p)}, nil
}

func (s *Server) deleteInstanceProfile(c *call) (any, error) {
	p, err := s.profileParam(c)
	if err != nil {
		return nil, err
	}
	if len(p.Roles) > 0 {
		return nil, deleteConflict("Cannot delete entity, must remove roles from instance profile first.")
	}
	delete(s.iam().Profiles, strings.ToLower(p.Name))
	return nil, nil
}

func (s *Server) addRoleToInstanceProfile(c *call) (any, error) {
	p, err := s.profileParam(c)
	if err != nil {
		return nil, err
	}
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	if len(p.Roles) > 0 {
		return nil, errorf(http.StatusConflict, "LimitExceeded", "Cannot exceed quota for InstanceSessionsPerInstanceProfile: 1")
	}
	p.Roles = append(p.Roles, r.Name)
	return nil, nil
}

func (s *Server) removeRoleFromInstanceProfile(c *call) (any, error) {
	p, err := s.profileParam(c)
	if err != nil {
		return nil, err
	}
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(p.Roles, r.Name) {
		return nil, noSuchEntity("The role with name %s is not in instance profile %s.", r.Name, p.Name)
	}
	p.Roles = deleteFunc(p.Roles, func(n string) bool { return n == r.Name })
	return nil, nil
}

func (s *Server) listInstanceProfilesForRole(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	out := struct {
		Profiles    []xmlInstanceProfile `xml:"InstanceProfiles>member"`
		IsTruncated bool                 `xml:"IsTruncated"`
	}{Profiles: []xmlInstanceProfile{}}
	for _, p := range s.iam().Profiles {
		if slices.Contains(p.Roles, r.Name) {
			out.Profiles = append(out.Profiles, s.profileXML(p))
		}
	}
	slices.SortFunc(out.Profiles, func(a, b xmlInstanceProfile) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
