package aws

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// queryAction answers one action of a Query protocol service. It runs with
// Server.mu held; its result is encoded as the action's result element (an
// xml-tagged struct, or nil for none).
type queryAction struct {
	run func(c *call) (any, error)
	// readOnly actions (Describe*, List*, Get*) do not save the state.
	readOnly bool
}

func do(run func(c *call) (any, error)) queryAction   { return queryAction{run: run} }
func read(run func(c *call) (any, error)) queryAction { return queryAction{run: run, readOnly: true} }

// call is one request to a Query action.
type call struct {
	s       *Server
	r       *http.Request
	sig     signature
	action  string
	p       params
	region  string
	request string // the request id
}

// account is the caller's account id.
func (c *call) account() string { return c.s.opts.AccountID }

// serveQuery answers a Query protocol request (EC2, ELBv2, Auto Scaling,
// IAM, STS): Action and its parameters in a form body, an XML answer.
func (s *Server) serveQuery(w http.ResponseWriter, r *http.Request, sig signature, actions map[string]queryAction, body []byte, id string) {
	vals, err := queryValues(r, body)
	if err != nil {
		writeError(w, sig.service, id, errorf(http.StatusBadRequest, "MalformedQueryString", "the request body is not a form: %v", err))
		return
	}
	action := vals.Get("Action")
	a, ok := actions[action]
	if !ok {
		writeError(w, sig.service, id, errorf(http.StatusBadRequest, "InvalidAction", "The action %s is not valid for this web service.", action))
		return
	}
	res, err := s.runRequest(r, sig, action, params(vals), id, a)
	if err != nil {
		writeError(w, sig.service, id, err)
		return
	}
	writeResult(w, sig.service, action, id, res)
}

// runRequest runs action a of a request with its parameters p (run), the
// region the signature's or the default.
func (s *Server) runRequest(r *http.Request, sig signature, action string, p params, id string, a queryAction) (any, error) {
	c := &call{s: s, r: r, sig: sig, action: action, p: p, region: sig.region, request: id}
	if c.region == "" {
		c.region = DefaultRegion
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run(c, a)
}

// run checks what every action is checked for (region, permission, faults,
// DryRun) and runs it, saving the state after a change. Callers hold s.mu.
func (s *Server) run(c *call, a queryAction) (any, error) {
	name := c.sig.service + ":" + c.action
	s.calls[name]++
	if !slices.Contains(s.opts.Regions, c.region) && c.sig.service != "iam" && c.sig.service != "sts" {
		return nil, errorf(http.StatusUnauthorized, "AuthFailure", "the region %s is not one of this local AWS's (%s)", c.region, strings.Join(s.opts.Regions, ", "))
	}
	if err := s.throttle(c.sig.service); err != nil {
		return nil, err
	}
	if slices.Contains(c.sig.cred.Deny, name) || !s.roleAllows(c.sig.cred, name, "*") {
		return nil, s.unauthorized(c)
	}
	if c.sig.service == "ec2" && c.p.Bool("DryRun") {
		return nil, errorf(http.StatusPreconditionFailed, "DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
	}
	res, err := a.run(c)
	if err != nil || a.readOnly {
		return res, err
	}
	if err := s.save(); err != nil {
		s.log.Error("saving the state failed", "action", name, "err", err)
		return nil, errorf(http.StatusInternalServerError, "InternalError", "the local AWS could not save its state: %v", err)
	}
	return res, nil
}

// unauthorized is the answer to an action the caller's key may not call.
func (s *Server) unauthorized(c *call) error {
	who := s.callerARN(c.sig.cred)
	what := c.sig.service + ":" + c.action // IAM names the actions by signing name
	if c.sig.service == "ec2" {
		return errorf(http.StatusForbidden, "UnauthorizedOperation", "You are not authorized to perform this operation. User: %s is not authorized to perform: %s because no identity-based policy allows the %s action", who, what, what)
	}
	return errorf(http.StatusForbidden, "AccessDenied", "User: %s is not authorized to perform: %s", who, what)
}

// params are a Query request's parameters, with AWS's list conventions:
// EC2's Name.N and Name.N.Field, the others' Name.member.N.
type params url.Values

// Get returns the parameter's value, "" when absent.
func (p params) Get(key string) string { return url.Values(p).Get(key) }

// Has reports whether the parameter is given.
func (p params) Has(key string) bool { return url.Values(p).Has(key) }

// Bool is a "true"/"false" parameter; absent is false.
func (p params) Bool(key string) bool { return p.Get(key) == "true" }

// Int is a numeric parameter, def when absent; a value that is not a
// number is an error naming it.
func (p params) Int(key string, def int) (int, error) {
	v := p.Get(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, errorf(http.StatusBadRequest, "InvalidParameterValue", "Value (%s) for parameter %s is invalid. Expected an integer.", v, key)
	}
	return n, nil
}

// Required returns a parameter that must be given.
func (p params) Required(key string) (string, error) {
	v := p.Get(key)
	if v == "" {
		return "", errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter %s", key)
	}
	return v, nil
}

// List returns the values of prefix.1, prefix.2, ... in order (EC2's
// InstanceId.N; pass "Names.member" for the others').
func (p params) List(prefix string) []string {
	var out []string
	for _, sub := range p.indexed(prefix) {
		out = append(out, sub.value)
	}
	return out
}

// Structs returns prefix.N.* as one params per N, in order, with prefix.N.
// taken off the keys: Filter.1.Name, Filter.1.Value.1 give one params with
// Name and Value.1.
func (p params) Structs(prefix string) []params {
	var out []params
	for _, sub := range p.indexed(prefix) {
		out = append(out, sub.fields)
	}
	return out
}

type indexedParam struct {
	n      int
	value  string // prefix.N
	fields params // prefix.N.*
}

func (p params) indexed(prefix string) []indexedParam {
	byN := map[int]*indexedParam{}
	for k, vs := range p {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		num, field, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 {
			continue
		}
		e := byN[n]
		if e == nil {
			e = &indexedParam{n: n, fields: params{}}
			byN[n] = e
		}
		if field == "" {
			e.value = vs[0]
		} else {
			e.fields[field] = vs
		}
	}
	out := make([]indexedParam, 0, len(byN))
	for _, e := range byN {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b indexedParam) int { return a.n - b.n })
	return out
}

// Tags are Key/Value pairs under prefix (EC2's TagSpecification.N.Tag.M is
// Structs("TagSpecification") then Tags("Tag"); the others' Tags.member.N
// is Tags("Tags.member")).
func (p params) Tags(prefix string) map[string]string {
	out := map[string]string{}
	for _, t := range p.Structs(prefix) {
		out[t.Get("Key")] = t.Get("Value")
	}
	return out
}

// apiError is an answer AWS gives as an error: its HTTP status, code and
// message, in the shape of the service that gives it.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errorf(status int, code, format string, args ...any) error {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Namespaces of the Query services' answers.
var namespaces = map[string]string{
	"ec2":                  "http://ec2.amazonaws.com/doc/2016-11-15/",
	"elasticloadbalancing": "http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/",
	"autoscaling":          "http://autoscaling.amazonaws.com/doc/2011-01-01/",
	"iam":                  "https://iam.amazonaws.com/doc/2010-05-08/",
	"sts":                  "https://sts.amazonaws.com/doc/2011-06-15/",
	"s3":                   "http://s3.amazonaws.com/doc/2006-03-01/",
}

// writeError answers err in the shape of service: EC2's Response/Errors,
// S3's Error, the others' ErrorResponse. An error that is not an apiError
// is an InternalError (500) whose message says what failed.
func writeError(w http.ResponseWriter, service, id string, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		e = &apiError{Status: http.StatusInternalServerError, Code: "InternalError", Message: err.Error()}
	}
	var b bytes.Buffer
	b.WriteString(xml.Header)
	switch service {
	case "ec2":
		fmt.Fprintf(&b, "<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>%s</RequestID></Response>",
			escape(e.Code), escape(e.Message), id)
	case "s3":
		fmt.Fprintf(&b, "<Error><Code>%s</Code><Message>%s</Message><RequestId>%s</RequestId></Error>", escape(e.Code), escape(e.Message), id)
	default:
		kind := "Sender"
		if e.Status >= 500 {
			kind = "Receiver"
		}
		fmt.Fprintf(&b, `<ErrorResponse xmlns="%s"><Error><Type>%s</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>%s</RequestId></ErrorResponse>`,
			namespaces[service], kind, escape(e.Code), escape(e.Message), id)
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-RequestId", id)
	w.Header().Set("X-Amz-Request-Id", id)
	w.WriteHeader(e.Status)
	_, _ = w.Write(b.Bytes())
}

func escape(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// writeResult answers a Query action: EC2's ActionResponse holds the
// result's fields beside its requestId; the others' hold an ActionResult
// and ResponseMetadata.
func writeResult(w http.ResponseWriter, service, action, id string, res any) {
	inner, err := innerXML(res)
	if err != nil {
		writeError(w, service, id, err)
		return
	}
	var b bytes.Buffer
	b.WriteString(xml.Header)
	if service == "ec2" {
		fmt.Fprintf(&b, `<%sResponse xmlns="%s"><requestId>%s</requestId>%s</%sResponse>`, action, namespaces[service], id, inner, action)
	} else {
		fmt.Fprintf(&b, `<%sResponse xmlns="%s"><%sResult>%s</%sResult><ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>`,
			action, namespaces[service], action, inner, action, id, action)
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-RequestId", id)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

// innerXML encodes v's fields without an element of its own.
func innerXML(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	var b bytes.Buffer
	if err := xml.NewEncoder(&b).EncodeElement(v, xml.StartElement{Name: xml.Name{Local: "x"}}); err != nil {
		return nil, fmt.Errorf("encoding the answer: %w", err)
	}
	out := bytes.TrimPrefix(b.Bytes(), []byte("<x>"))
	return bytes.TrimSuffix(out, []byte("</x>")), nil
}
