package aws

import (
	"encoding/json"
	"strings"
)

// The permissions of a role's temporary credentials (an instance's, from
// IMDS) are its inline policies: an action on a resource is allowed when a
// statement allows it and none denies it. Managed policies attached to the
// role, conditions and NotAction/NotResource are not evaluated: a test
// double's simplification, which can only refuse more than AWS would.

type policyDocument struct {
	Statement statements `json:"Statement"`
}

type statement struct {
	Effect   string  `json:"Effect"`
	Action   strList `json:"Action"`
	Resource strList `json:"Resource"`
}

// statements and strList take a JSON value that is one item or a list.
type statements []statement

func (s *statements) UnmarshalJSON(b []byte) error {
	var one statement
	if json.Unmarshal(b, &one) == nil && one.Effect != "" {
		*s = statements{one}
		return nil
	}
	var many []statement
	err := json.Unmarshal(b, &many)
	*s = many
	return err
}

type strList []string

func (l *strList) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*l = strList{one}
		return nil
	}
	var many []string
	err := json.Unmarshal(b, &many)
	*l = many
	return err
}

// roleAllows reports whether credentials of a role may call action
// ("service:Action") on resource (an ARN; "*" for actions the local AWS
// does not scope). Other credentials are not limited here (Deny lists
// them). Callers hold s.mu.
func (s *Server) roleAllows(cred Credential, action, resource string) bool {
	if cred.Role == "" {
		return true
	}
	r := s.iam().Roles[strings.ToLower(cred.Role)]
	if r == nil {
		return false
	}
	allowed := false
	for _, doc := range r.Inline {
		var p policyDocument
		if json.Unmarshal([]byte(doc), &p) != nil {
			continue
		}
		for _, st := range p.Statement {
			if !anyGlob(st.Action, action, true) || (resource != "*" && !anyGlob(st.Resource, resource, false)) {
				continue
			}
			if st.Effect == "Deny" {
				return false
			}
			allowed = allowed || st.Effect == "Allow"
		}
	}
	return allowed
}

func anyGlob(patterns []string, v string, fold bool) bool {
	for _, p := range patterns {
		if fold {
			p, v = strings.ToLower(p), strings.ToLower(v)
		}
		if glob(p, v) {
			return true
		}
	}
	return false
}

// glob matches IAM's wildcards: * any run of characters, ? one.
func glob(p, v string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := len(v); i >= 0; i-- {
				if glob(p[1:], v[i:]) {
					return true
				}
			}
			return false
		case '?':
			if v == "" {
				return false
			}
		default:
			if v == "" || v[0] != p[0] {
				return false
			}
		}
		p, v = p[1:], v[1:]
	}
	return v == ""
}
