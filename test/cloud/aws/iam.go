package aws

import (
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// iamState is IAM's part of the state: roles and instance profiles, by
// lower-cased name (IAM names are unique without regard to case). IAM is
// global: no region.
type iamState struct {
	Roles    map[string]*iamRole         `json:"roles"`
	Profiles map[string]*instanceProfile `json:"instanceProfiles"`
}

func newIAMState() *iamState {
	return &iamState{Roles: map[string]*iamRole{}, Profiles: map[string]*instanceProfile{}}
}

// iamRole is a role: its trust policy, inline policies by name and the
// managed policies attached to it by ARN.
type iamRole struct {
	Name        string            `json:"name"`
	ID          string            `json:"id"`
	Path        string            `json:"path"`
	Trust       string            `json:"assumeRolePolicyDocument"`
	Description string            `json:"description,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
	Inline      map[string]string `json:"inlinePolicies,omitempty"`
	Attached    []string          `json:"attachedPolicies,omitempty"`
	Created     time.Time         `json:"created"`
}

// instanceProfile is an instance profile, with at most one role (by name).
type instanceProfile struct {
	Name    string            `json:"name"`
	ID      string            `json:"id"`
	Path    string            `json:"path"`
	Tags    map[string]string `json:"tags,omitempty"`
	Roles   []string          `json:"roles,omitempty"`
	Created time.Time         `json:"created"`
}

func (s *Server) iamActions() map[string]queryAction {
	return map[string]queryAction{
		"CreateRole":                    do(s.createRole),
		"GetRole":                       read(s.getRole),
		"DeleteRole":                    do(s.deleteRole),
		"ListRoles":                     read(s.listRoles),
		"TagRole":                       do(s.tagRole),
		"UntagRole":                     do(s.untagRole),
		"ListRoleTags":                  read(s.listRoleTags),
		"PutRolePolicy":                 do(s.putRolePolicy),
		"GetRolePolicy":                 read(s.getRolePolicy),
		"DeleteRolePolicy":              do(s.deleteRolePolicy),
		"ListRolePolicies":              read(s.listRolePolicies),
		"AttachRolePolicy":              do(s.attachRolePolicy),
		"DetachRolePolicy":              do(s.detachRolePolicy),
		"ListAttachedRolePolicies":      read(s.listAttachedRolePolicies),
		"CreateInstanceProfile":         do(s.createInstanceProfile),
		"GetInstanceProfile":            read(s.getInstanceProfile),
		"DeleteInstanceProfile":         do(s.deleteInstanceProfile),
		"AddRoleToInstanceProfile":      do(s.addRoleToInstanceProfile),
		"RemoveRoleFromInstanceProfile": do(s.removeRoleFromInstanceProfile),
		"ListInstanceProfilesForRole":   read(s.listInstanceProfilesForRole),
	}
}

// iam is IAM's state, its maps made. Callers hold s.mu.
func (s *Server) iam() *iamState {
	if s.st.IAM.Roles == nil {
		s.st.IAM.Roles = map[string]*iamRole{}
	}
	if s.st.IAM.Profiles == nil {
		s.st.IAM.Profiles = map[string]*instanceProfile{}
	}
	return s.st.IAM
}

// profileExists reports whether an instance profile is there, by name or
// ARN (RunInstances' IamInstanceProfile). Callers hold s.mu.
func (s *Server) profileExists(nameOrARN string) bool { return s.profileOf(nameOrARN) != nil }

// profileOf is the instance profile of a name or ARN; nil when there is
// none. Callers hold s.mu.
func (s *Server) profileOf(nameOrARN string) *instanceProfile {
	name := nameOrARN
	if strings.HasPrefix(nameOrARN, "arn:") {
		prefix := "arn:aws:iam::" + s.opts.AccountID + ":instance-profile/"
		rest, ok := strings.CutPrefix(nameOrARN, prefix)
		if !ok {
			return nil
		}
		name = rest[strings.LastIndex(rest, "/")+1:]
	}
	if name == "" {
		return nil
	}
	return s.iam().Profiles[strings.ToLower(name)]
}

var iamName = regexp.MustCompile(`^[\w+=,.@-]{1,64}$`)

// iamID is an IAM unique id: prefix (AROA for roles, AIPA for instance
// profiles) and 17 upper-case letters and digits.
func iamID(prefix string) string {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	b := make([]byte, 17)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return prefix + string(b)
}

func noSuchEntity(format string, args ...any) error {
	return errorf(http.StatusNotFound, "NoSuchEntity", format, args...)
}

func deleteConflict(format string, args ...any) error {
	return errorf(http.StatusConflict, "DeleteConflict", format, args...)
}

// nameParam is a required IAM name parameter, checked as IAM checks names.
func nameParam(p params, key string) (string, error) {
	v, err := p.Required(key)
	if err != nil {
		return "", errorf(http.StatusBadRequest, "ValidationError", "1 validation error detected: Value null at '%s' failed to satisfy constraint: Member must not be null", key)
	}
	if !iamName.MatchString(v) {
		return "", errorf(http.StatusBadRequest, "ValidationError", "1 validation error detected: Value '%s' at '%s' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]+", v, key)
	}
	return v, nil
}

// pathParam is an IAM path: "/" by default, else /.../.
func pathParam(p params) (string, error) {
	path := p.Get("Path")
	if path == "" {
		return "/", nil
	}
	if !strings.HasPrefix(path, "/") || !strings.HasSuffix(path, "/") {
		return "", errorf(http.StatusBadRequest, "ValidationError", "The specified value for path is invalid. It must begin and end with / and contain only alphanumeric characters and/or / characters.")
	}
	return path, nil
}

// policyParam is a policy document parameter, which must be JSON.
func policyParam(p params, key string) (string, error) {
	doc, err := p.Required(key)
	if err != nil {
		return "", errorf(http.StatusBadRequest, "ValidationError", "1 validation error detected: Value null at '%s' failed to satisfy constraint: Member must not be null", key)
	}
	if !json.Valid([]byte(doc)) {
		return "", errorf(http.StatusBadRequest, "MalformedPolicyDocument", "Syntax errors in policy.")
	}
	return doc, nil
}

// encodePolicy is a policy document as IAM answers it: URL-encoded
// (RFC 3986), which clients decode.
func encodePolicy(doc string) string { return strings.ReplaceAll(url.QueryEscape(doc), "+", "%20") }

type xmlTag struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

func tagList(tags map[string]string) []xmlTag {
	out := make([]xmlTag, 0, len(tags))
	for k, v := range tags {
		out = append(out, xmlTag{k, v})
	}
	slices.SortFunc(out, func(a, b xmlTag) int { return strings.Compare(a.Key, b.Key) })
	return out
}

type xmlRole struct {
	Path        string   `xml:"Path"`
	RoleName    string   `xml:"RoleName"`
	RoleID      string   `xml:"RoleId"`
	Arn         string   `xml:"Arn"`
	CreateDate  string   `xml:"CreateDate"`
	Trust       string   `xml:"AssumeRolePolicyDocument"`
	Description string   `xml:"Description,omitempty"`
	MaxSession  int      `xml:"MaxSessionDuration"`
	Tags        []xmlTag `xml:"Tags>member,omitempty"`
}

func (s *Server) roleXML(r *iamRole) xmlRole {
	return xmlRole{Path: r.Path, RoleName: r.Name, RoleID: r.ID, Arn: "arn:aws:iam::" + s.opts.AccountID + ":role" + r.Path + r.Name,
		CreateDate: awsTime(r.Created), Trust: encodePolicy(r.Trust), Description: r.Description, MaxSession: 3600, Tags: tagList(r.Tags)}
}

// roleParam is the role RoleName names.
func (s *Server) roleParam(c *call) (*iamRole, error) {
	name, err := nameParam(c.p, "RoleName")
	if err != nil {
		return nil, err
	}
	r := s.iam().Roles[strings.ToLower(name)]
	if r == nil {
		return nil, noSuchEntity("The role with name %s cannot be found.", name)
	}
	return r, nil
}

func (s *Server) createRole(c *call) (any, error) {
	name, err := nameParam(c.p, "RoleName")
	if err != nil {
		return nil, err
	}
	path, err := pathParam(c.p)
	if err != nil {
		return nil, err
	}
	trust, err := policyParam(c.p, "AssumeRolePolicyDocument")
	if err != nil {
		return nil, err
	}
	if s.iam().Roles[strings.ToLower(name)] != nil {
		return nil, errorf(http.StatusConflict, "EntityAlreadyExists", "Role with name %s already exists.", name)
	}
	r := &iamRole{Name: name, ID: iamID("AROA"), Path: path, Trust: trust, Description: c.p.Get("Description"),
		Tags: c.p.Tags("Tags.member"), Inline: map[string]string{}, Created: s.opts.Now()}
	s.iam().Roles[strings.ToLower(name)] = r
	return struct {
		Role xmlRole `xml:"Role"`
	}{s.roleXML(r)}, nil
}

func (s *Server) getRole(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	return struct {
		Role xmlRole `xml:"Role"`
	}{s.roleXML(r)}, nil
}

func (s *Server) deleteRole(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	switch {
	case len(r.Inline) > 0:
		return nil, deleteConflict("Cannot delete entity, must delete policies first.")
	case len(r.Attached) > 0:
		return nil, deleteConflict("Cannot delete entity, must detach all policies first.")
	}
	for _, p := range s.iam().Profiles {
		if slices.Contains(p.Roles, r.Name) {
			return nil, deleteConflict("Cannot delete entity, must remove roles from instance profile first.")
		}
	}
	delete(s.iam().Roles, strings.ToLower(r.Name))
	return nil, nil
}

func (s *Server) listRoles(c *call) (any, error) {
	prefix := c.p.Get("PathPrefix")
	var out struct {
		Roles       []xmlRole `xml:"Roles>member"`
		IsTruncated bool      `xml:"IsTruncated"`
	}
	for _, r := range s.iam().Roles {
		if strings.HasPrefix(r.Path, prefix) {
			out.Roles = append(out.Roles, s.roleXML(r))
		}
	}
	slices.SortFunc(out.Roles, func(a, b xmlRole) int { return strings.Compare(a.RoleName, b.RoleName) })
	return out, nil
}

func (s *Server) tagRole(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	if r.Tags == nil {
		r.Tags = map[string]string{}
	}
	for k, v := range c.p.Tags("Tags.member") {
		r.Tags[k] = v
	}
	return nil, nil
}

func (s *Server) untagRole(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	for _, k := range c.p.List("TagKeys.member") {
		delete(r.Tags, k)
	}
	return nil, nil
}

func (s *Server) listRoleTags(c *call) (any, error) {
	r, err := s.roleParam(c)
	if err != nil {
		return nil, err
	}
	return struct {
		Tags        []xmlTag `xml:"Tags>member"`
		IsTruncated bool     `xml:"IsTruncated"`
	}{Tags: tagList(r.Tags)}, nil
}
