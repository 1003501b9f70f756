package aws

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The instance endpoint of a VPC: what its instances reach at the VPC's
// gateway address (Machines.Address) on Options.InstancePort. It serves
// the instance metadata service (IMDSv2, /latest/...) and every service of
// the local AWS, and instances are told so by the environment variables
// the AWS SDKs read: AWS_EC2_METADATA_SERVICE_ENDPOINT and
// AWS_ENDPOINT_URL (on AWS, 169.254.169.254 and the regional endpoints).
// An instance is known by its address in the VPC; with an instance profile
// it gets temporary credentials of its role, which the local AWS accepts
// with that role's inline policies as their permissions.

// How long IMDS's role credentials last, and how long before they end
// IMDS hands out new ones (as AWS's, which rotate well before).
const (
	roleCredentialTTL   = 6 * time.Hour
	roleCredentialRenew = 15 * time.Minute
)

// instanceEndpoints are the VPCs' endpoints and what IMDS handed out.
type instanceEndpoints struct {
	mu      sync.Mutex
	servers map[string]*http.Server // by VPC id
	tokens  map[string]imdsToken    // IMDSv2 session tokens
	creds   map[string]Credential   // role credentials by access key id
}

type imdsToken struct {
	instance string
	expires  time.Time
}

func newInstanceEndpoints() *instanceEndpoints {
	return &instanceEndpoints{servers: map[string]*http.Server{}, tokens: map[string]imdsToken{}, creds: map[string]Credential{}}
}

// instanceEnv returns the environment a machine of subnet sn runs with:
// where its VPC's instance endpoint is, started when it is not yet. None
// when Options.InstancePort is 0.
func (s *Server) instanceEnv(ctx context.Context, sn *subnet) ([]string, error) {
	if s.opts.InstancePort == 0 || s.opts.Machines == nil {
		return nil, nil
	}
	addr, err := s.opts.Machines.Address(ctx, sn)
	if err != nil {
		return nil, err
	}
	hostPort := netip.AddrPortFrom(addr, uint16(s.opts.InstancePort)).String()
	ie := s.ie
	ie.mu.Lock()
	defer ie.mu.Unlock()
	if ie.servers[sn.VPCID] == nil {
		ln, err := net.Listen("tcp", hostPort)
		if err != nil {
			return nil, fmt.Errorf("the instance endpoint of VPC %s: %w", sn.VPCID, err)
		}
		hs := &http.Server{Handler: s.instanceHandler(sn.VPCID), ReadHeaderTimeout: 10 * time.Second}
		ie.servers[sn.VPCID] = hs
		go func() { _ = hs.Serve(ln) }()
		s.log.Info("serving the instance endpoint", "vpc", sn.VPCID, "address", hostPort)
	}
	return []string{"AWS_EC2_METADATA_SERVICE_ENDPOINT=http://" + hostPort + "/", "AWS_ENDPOINT_URL=http://" + hostPort}, nil
}

// restoreInstanceEndpoints starts the endpoints of the VPCs that have live
// instances (after a restart of the local AWS).
func (s *Server) restoreInstanceEndpoints(ctx context.Context) {
	s.mu.Lock()
	var subnets []*subnet
	seen := map[string]bool{}
	for _, i := range s.st.EC2.Compute.Instances {
		if sn, ok := s.subnetOf(i.SubnetID); ok && i.live() && !seen[i.VPCID] {
			seen[i.VPCID] = true
			m := s.machineSubnet(sn)
			subnets = append(subnets, &m)
		}
	}
	s.mu.Unlock()
	for _, sn := range subnets {
		if _, err := s.instanceEnv(ctx, sn); err != nil {
			s.log.Warn("the instance endpoint could not start again", "vpc", sn.VPCID, "err", err)
		}
	}
}

// closeInstanceEndpoints stops every VPC's endpoint.
func (s *Server) closeInstanceEndpoints() {
	s.ie.mu.Lock()
	defer s.ie.mu.Unlock()
	for vpc, hs := range s.ie.servers {
		_ = hs.Close()
		delete(s.ie.servers, vpc)
	}
}

// InstanceHandler serves the instance endpoint of a VPC on a listener the
// caller made (tests of what instances do): IMDS knows an instance by the
// request's source address.
func (s *Server) InstanceHandler(vpc string) http.Handler { return s.instanceHandler(vpc) }

// instanceHandler serves a VPC's endpoint: IMDS under /latest/, the local
// AWS's services elsewhere.
func (s *Server) instanceHandler(vpc string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/latest/") {
			s.serveIMDS(w, r, vpc)
			return
		}
		s.ServeHTTP(w, r)
	})
}

// metadata is what IMDS tells an instance about itself.
type metadata struct {
	id, ip, zone, region, role, profileARN, profileID string
	// interruptAt is when a spot instance given its notice is terminated.
	interruptAt *time.Time
}

// instanceAt finds the live instance of vpc at the request's source
// address.
func (s *Server) instanceAt(r *http.Request, vpc string) (metadata, bool) {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range s.st.EC2.Compute.Instances {
		if i.VPCID != vpc || i.PrivateIP != host || !i.live() {
			continue
		}
		m := metadata{id: i.ID, ip: i.PrivateIP, zone: i.Zone, region: i.Region, interruptAt: i.InterruptAt}
		if p := s.profileOf(i.Profile); p != nil {
			m.profileARN = "arn:aws:iam::" + s.opts.AccountID + ":instance-profile" + p.Path + p.Name
			m.profileID = p.ID
			if len(p.Roles) > 0 {
				m.role = p.Roles[0]
			}
		}
		return m, true
	}
	return metadata{}, false
}

// serveIMDS answers the instance metadata service, IMDSv2 only: a session
// token from PUT /latest/api/token, then GETs carrying it.
func (s *Server) serveIMDS(w http.ResponseWriter, r *http.Request, vpc string) {
	m, ok := s.instanceAt(r, vpc)
	if !ok {
		http.Error(w, "not an instance of this VPC", http.StatusForbidden)
		return
	}
	now := s.opts.Now()
	ie := s.ie
	if r.URL.Path == "/latest/api/token" {
		ttl, err := strconv.Atoi(r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
		if r.Method != http.MethodPut || err != nil || ttl < 1 || ttl > 21600 {
			http.Error(w, "a PUT with X-aws-ec2-metadata-token-ttl-seconds of 1 to 21600", http.StatusBadRequest)
			return
		}
		token := secretHex(24)
		ie.mu.Lock()
		ie.tokens[token] = imdsToken{instance: m.id, expires: now.Add(time.Duration(ttl) * time.Second)}
		ie.mu.Unlock()
		w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", strconv.Itoa(ttl))
		_, _ = w.Write([]byte(token))
		return
	}
	ie.mu.Lock()
	t, ok := ie.tokens[r.Header.Get("X-aws-ec2-metadata-token")]
	ie.mu.Unlock()
	if r.Method != http.MethodGet {
		http.Error(w, "", http.StatusMethodNotAllowed)
		return
	}
	if !ok || t.instance != m.id || now.After(t.expires) {
		w.WriteHeader(http.StatusUnauthorized) // IMDSv2 only: a session token is required
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/latest/")
	text := func(v string) { _, _ = w.Write([]byte(v)) }
	switch {
	case path == "meta-data/instance-id":
		text(m.id)
	case path == "meta-data/local-ipv4":
		text(m.ip)
	case path == "meta-data/placement/availability-zone":
		text(m.zone)
	case path == "meta-data/placement/region":
		text(m.region)
	case path == "meta-data/spot/instance-action" && m.interruptAt != nil:
		// As AWS's: 404 until the instance is given its notice.
		_ = json.NewEncoder(w).Encode(map[string]string{"action": "terminate", "time": m.interruptAt.UTC().Format(time.RFC3339)})
	case path == "dynamic/instance-identity/document":
		_ = json.NewEncoder(w).Encode(map[string]string{"accountId": s.opts.AccountID, "instanceId": m.id, "region": m.region,
			"availabilityZone": m.zone, "privateIp": m.ip})
	case m.role == "" && strings.HasPrefix(path, "meta-data/iam/"):
		http.NotFound(w, r) // no instance profile
	case path == "meta-data/iam/info":
		_ = json.NewEncoder(w).Encode(map[string]string{"Code": "Success", "LastUpdated": now.UTC().Format(time.RFC3339),
			"InstanceProfileArn": m.profileARN, "InstanceProfileId": m.profileID})
	case path == "meta-data/iam/security-credentials/" || path == "meta-data/iam/security-credentials":
		text(m.role)
	case path == "meta-data/iam/security-credentials/"+m.role:
		c := s.roleCredential(m, now)
		_ = json.NewEncoder(w).Encode(map[string]string{"Code": "Success", "LastUpdated": now.UTC().Format(time.RFC3339), "Type": "AWS-HMAC",
			"AccessKeyId": c.AccessKeyID, "SecretAccessKey": c.SecretAccessKey, "Token": c.SessionToken,
			"Expiration": c.Expires.UTC().Format(time.RFC3339)})
	default:
		http.NotFound(w, r)
	}
}

// roleCredential returns the instance's credentials of its role: those it
// has while they last long enough, else new ones.
func (s *Server) roleCredential(m metadata, now time.Time) Credential {
	ie := s.ie
	ie.mu.Lock()
	defer ie.mu.Unlock()
	for _, c := range ie.creds {
		if c.instance == m.id && c.Role == m.role && c.Expires.Sub(now) > roleCredentialRenew {
			return c
		}
	}
	for key, c := range ie.creds {
		if now.After(c.Expires) {
			delete(ie.creds, key)
		}
	}
	c := Credential{AccessKeyID: "ASIA" + strings.ToUpper(secretHex(8)), SecretAccessKey: secretHex(20), SessionToken: secretHex(48),
		User: "assumed-role/" + m.role + "/" + m.id, Role: m.role, Expires: now.Add(roleCredentialTTL), instance: m.id}
	ie.creds[c.AccessKeyID] = c
	return c
}

// temporary returns the role credentials of an access key id IMDS handed
// out.
func (s *Server) temporary(key string) (Credential, bool) {
	s.ie.mu.Lock()
	defer s.ie.mu.Unlock()
	c, ok := s.ie.creds[key]
	return c, ok
}

func secretHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
