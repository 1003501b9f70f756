package aws

import "net/http"

// stsActions are STS's: who the caller is.
func (s *Server) stsActions() map[string]queryAction {
	return map[string]queryAction{"GetCallerIdentity": read(s.getCallerIdentity)}
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
