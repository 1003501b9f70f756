package aws

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// DefaultVCPUQuota is a region's vCPU quota for running on-demand standard
// instances when Faults.VCPUQuota sets none.
const DefaultVCPUQuota = 1024

// QuotaStandardVCPUs is Service Quotas' code of EC2's "Running On-Demand
// Standard (A, C, D, H, I, M, R, T, Z) instances" quota, in vCPUs: the one
// the local AWS enforces (on every instance, spot ones too: AWS counts
// those against a quota of their own).
const QuotaStandardVCPUs = "L-1216C47A"

// DefaultLoadBalancerQuota is a region's quota of network load balancers
// when Faults.LoadBalancerQuota sets none (AWS's default).
const DefaultLoadBalancerQuota = 50

// QuotaNetworkLoadBalancers is Service Quotas' code of Elastic Load
// Balancing's "Network Load Balancers per Region": CreateLoadBalancer
// beyond it is TooManyLoadBalancers.
const QuotaNetworkLoadBalancers = "L-69A177A2"

// lbQuota is the region's quota of network load balancers. Callers hold
// s.mu.
func (s *Server) lbQuota() int {
	if s.faults.LoadBalancerQuota > 0 {
		return s.faults.LoadBalancerQuota
	}
	return DefaultLoadBalancerQuota
}

// vcpuQuota is the region's vCPU quota. Callers hold s.mu.
func (s *Server) vcpuQuota() int {
	if s.faults.VCPUQuota > 0 {
		return s.faults.VCPUQuota
	}
	return DefaultVCPUQuota
}

// quotaActions are Service Quotas' actions (JSON 1.1 protocol).
func (s *Server) quotaActions() map[string]queryAction {
	return map[string]queryAction{"GetServiceQuota": read(s.getServiceQuota)}
}

type quotaJSON struct {
	ServiceCode string  `json:"ServiceCode"`
	ServiceName string  `json:"ServiceName"`
	QuotaArn    string  `json:"QuotaArn"`
	QuotaCode   string  `json:"QuotaCode"`
	QuotaName   string  `json:"QuotaName"`
	Value       float64 `json:"Value"`
	Unit        string  `json:"Unit"`
	Adjustable  bool    `json:"Adjustable"`
	GlobalQuota bool    `json:"GlobalQuota"`
}

func (s *Server) getServiceQuota(c *call) (any, error) {
	service, code := c.p.Get("ServiceCode"), c.p.Get("QuotaCode")
	if service == "" || code == "" {
		return nil, errorf(http.StatusBadRequest, "ValidationException", "ServiceCode and QuotaCode are required")
	}
	if service == "elasticloadbalancing" && code == QuotaNetworkLoadBalancers {
		return struct {
			Quota quotaJSON `json:"Quota"`
		}{quotaJSON{ServiceCode: service, ServiceName: "Elastic Load Balancing (ELB)",
			QuotaArn:  fmt.Sprintf("arn:aws:servicequotas:%s:%s:%s/%s", c.region, s.opts.AccountID, service, code),
			QuotaCode: code, QuotaName: "Network Load Balancers per Region",
			Value: float64(s.lbQuota()), Unit: "None", Adjustable: true}}, nil
	}
	if service != "ec2" || code != QuotaStandardVCPUs {
		return nil, errorf(http.StatusBadRequest, "NoSuchResourceException", "The request failed because the specified quota %s of service %s does not exist in the local AWS.", code, service)
	}
	return struct {
		Quota quotaJSON `json:"Quota"`
	}{quotaJSON{ServiceCode: "ec2", ServiceName: "Amazon Elastic Compute Cloud (Amazon EC2)",
		QuotaArn:  fmt.Sprintf("arn:aws:servicequotas:%s:%s:ec2/%s", c.region, s.opts.AccountID, code),
		QuotaCode: code, QuotaName: "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
		Value: float64(s.vcpuQuota()), Unit: "None", Adjustable: true}}, nil
}

// serveJSON answers a service of AWS's JSON 1.1 protocol: the action in
// X-Amz-Target (Prefix.Action), its input a JSON object of plain fields,
// checked and run as Query actions are (s.run).
func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request, sig signature, actions map[string]queryAction, body []byte, id string) {
	_, action, _ := strings.Cut(r.Header.Get("X-Amz-Target"), ".")
	a, ok := actions[action]
	if !ok {
		writeJSONError(w, id, errorf(http.StatusBadRequest, "UnknownOperationException", "the local AWS's %s has no operation %q", sig.service, action))
		return
	}
	var in map[string]any
	if len(body) > 0 {
		if err := json.Unmarshal(body, &in); err != nil {
			writeJSONError(w, id, errorf(http.StatusBadRequest, "SerializationException", "the request body is not a JSON object: %v", err))
			return
		}
	}
	p := params{}
	for k, v := range in {
		if str, ok := v.(string); ok {
			p[k] = []string{str}
		}
	}
	res, err := s.runRequest(r, sig, action, p, id, a)
	if err != nil {
		writeJSONError(w, id, err)
		return
	}
	b, err := json.Marshal(res)
	if err != nil {
		writeJSONError(w, id, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", id)
	_, _ = w.Write(b)
}

// writeJSONError answers with an error as JSON 1.1 services do; a denied
// action is AccessDeniedException there.
func writeJSONError(w http.ResponseWriter, id string, err error) {
	e, ok := err.(*apiError)
	if !ok {
		e = &apiError{Status: http.StatusInternalServerError, Code: "ServiceException", Message: err.Error()}
	}
	code := e.Code
	if code == "AccessDenied" {
		code = "AccessDeniedException"
	}
	b, _ := json.Marshal(map[string]string{"__type": code, "Message": e.Message})
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-RequestId", id)
	w.WriteHeader(e.Status)
	_, _ = w.Write(b)
}
