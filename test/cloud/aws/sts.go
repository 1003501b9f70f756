package aws

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// stsActions are STS's: who the caller is, and a role's temporary
// credentials.
func (s *Server) stsActions() map[string]queryAction {
	return map[string]queryAction{"GetCallerIdentity": read(s.getCallerIdentity), "AssumeRole": read(s.assumeRole)}
}

var sessionName = regexp.MustCompile(`^[\w+=,.@-]{2,64}$`)

// assumeRole hands out temporary credentials of a role whose trust policy
// lets the caller's account (its root, the caller's ARN or "*") assume
// it; their permissions are the role's inline policies (roleAllows).
func (s *Server) assumeRole(c *call) (any, error) {
	arn, err := c.p.Required("RoleArn")
	if err != nil {
		return nil, err
	}
	session, err := c.p.Required("RoleSessionName")
	if err != nil {
		return nil, err
	}
	if !sessionName.MatchString(session) {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "1 validation error detected: Value '%s' at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]*", session)
	}
	duration, err := c.p.Int("DurationSeconds", 3600)
	if err != nil || duration < 900 || duration > 43200 {
		return nil, errorf(http.StatusBadRequest, "ValidationError", "The requested DurationSeconds must be 900 to 43200 seconds")
	}
	prefix := "arn:aws:iam::" + s.opts.AccountID + ":role/"
	name, ok := strings.CutPrefix(arn, prefix)
	var r *iamRole
	if ok {
		r = s.iam().Roles[strings.ToLower(name[strings.LastIndex(name, "/")+1:])]
	}
	caller := s.callerARN(c.sig.cred)
	if r == nil || !trusts(r.Trust, s.opts.AccountID, caller) {
		return nil, errorf(http.StatusForbidden, "AccessDenied", "User: %s is not authorized to perform: sts:AssumeRole on resource: %s", caller, arn)
	}
	now := s.opts.Now()
	cred := Credential{AccessKeyID: "ASIA" + strings.ToUpper(secretHex(8)), SecretAccessKey: secretHex(20), SessionToken: secretHex(48),
		User: "assumed-role/" + r.Name + "/" + session, Role: r.Name, Expires: now.Add(time.Duration(duration) * time.Second)}
	s.ie.mu.Lock()
	s.ie.creds[cred.AccessKeyID] = cred
	s.ie.mu.Unlock()
	type credsXML struct {
		AccessKeyID     string `xml:"AccessKeyId"`
		SecretAccessKey string `xml:"SecretAccessKey"`
		SessionToken    string `xml:"SessionToken"`
		Expiration      string `xml:"Expiration"`
	}
	return struct {
		Credentials credsXML `xml:"Credentials"`
		User        struct {
			Arn string `xml:"Arn"`
			ID  string `xml:"AssumedRoleId"`
		} `xml:"AssumedRoleUser"`
	}{Credentials: credsXML{cred.AccessKeyID, cred.SecretAccessKey, cred.SessionToken, cred.Expires.UTC().Format(time.RFC3339)},
		User: struct {
			Arn string `xml:"Arn"`
			ID  string `xml:"AssumedRoleId"`
		}{s.callerARN(cred), r.ID + ":" + session}}, nil
}

// trusts reports whether a role's trust policy lets a principal of account
// (caller's ARN, the account's root, or "*") call sts:AssumeRole.
func trusts(doc, account, caller string) bool {
	var p struct {
		Statement []struct {
			Effect    string
			Action    strList
			Principal struct {
				AWS strList
			}
		}
	}
	if json.Unmarshal([]byte(doc), &p) != nil {
		return false
	}
	for _, st := range p.Statement {
		if st.Effect == "Allow" && anyGlob(st.Action, "sts:AssumeRole", true) &&
			slices.ContainsFunc(st.Principal.AWS, func(a string) bool {
				return a == "*" || a == caller || a == "arn:aws:iam::"+account+":root" || a == account
			}) {
			return true
		}
	}
	return false
}

func (s *Server) getCallerIdentity(c *call) (any, error) {
	if c.r.Method != http.MethodPost && c.r.Method != http.MethodGet {
		return nil, errorf(http.StatusBadRequest, "InvalidAction", "GetCallerIdentity is a POST")
	}
	return struct {
		Arn     string `xml:"Arn"`
		UserID  string `xml:"UserId"`
		Account string `xml:"Account"`
	}{Arn: c.s.callerARN(c.sig.cred), UserID: "AIDA" + c.sig.cred.AccessKeyID, Account: c.account()}, nil
}

// callerARN is who a key is: its IAM user, or the role session of
// temporary credentials.
func (s *Server) callerARN(cred Credential) string {
	if cred.Role != "" {
		return "arn:aws:sts::" + s.opts.AccountID + ":" + cred.User
	}
	return "arn:aws:iam::" + s.opts.AccountID + ":user/" + cred.User
}
