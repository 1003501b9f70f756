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
	}{Arn: "arn:aws:iam::" + c.account() + ":user/" + c.sig.cred.User, UserID: "AIDA" + c.sig.cred.AccessKeyID, Account: c.account()}, nil
}
