package aws

import (
	"context"
	"errors"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
)

// Security group roles (TagPart "sg-ROLE").
const (
	sgControlPlane = "control-plane"
	sgWorker       = "worker"
	sgBastion      = "bastion"
	sgLoadBalancer = "load-balancer"
)

var sgRoles = []string{sgControlPlane, sgWorker, sgBastion, sgLoadBalancer}

// rule is one ingress rule: a port range from a CIDR or from another of
// the cluster's groups.
type rule struct {
	proto      string // tcp, udp, or -1 for all
	from, to   int32
	cidr       string
	group      string // a role of sgRoles
	what       string // the rule's description
	vpcPrivate bool   // from the VPC's CIDR
}

// ingress is what each group lets in, and nothing more: the API server
// from the load balancer's clients (a network load balancer keeps the
// client's address), etcd and the kubelets between the nodes that need
// them, the pod network between nodes, SSH only from the bastion and to
// the bastion.
func ingress() map[string][]rule {
	nodes := func(what string) []rule {
		return []rule{{proto: "-1", group: sgControlPlane, what: what}, {proto: "-1", group: sgWorker, what: what}}
	}
	return map[string][]rule{
		sgControlPlane: append(nodes("the pod network, kubelets and etcd between the nodes"),
			rule{proto: "tcp", from: APIServerPort, to: APIServerPort, cidr: "0.0.0.0/0", what: "the API server, through the load balancer"},
			rule{proto: "tcp", from: 22, to: 22, group: sgBastion, what: "SSH from the bastion"}),
		sgWorker: append(nodes("the pod network and kubelets between the nodes"),
			rule{proto: "tcp", from: 30000, to: 32767, vpcPrivate: true, what: "NodePort services from the VPC"},
			rule{proto: "tcp", from: 22, to: 22, group: sgBastion, what: "SSH from the bastion"}),
		sgBastion:      {{proto: "tcp", from: 22, to: 22, cidr: "0.0.0.0/0", what: "SSH, the only way in"}},
		sgLoadBalancer: {{proto: "tcp", from: APIServerPort, to: APIServerPort, cidr: "0.0.0.0/0", what: "the API server"}},
	}
}

// ensureSecurityGroups finds or makes the cluster's four groups and their
// rules (a rule that exists is left alone).
func (p *AWS) ensureSecurityGroups(ctx context.Context, c *cluster, n *vpcNet) error {
	out, err := c.api.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: c.filter("")})
	if err != nil {
		return classify(err, "", "find the security groups of cluster %s", c.Name)
	}
	have := map[string]ec2types.SecurityGroup{}
	for _, g := range out.SecurityGroups {
		have[tagOf(g.Tags, TagPart)] = g
	}
	for _, role := range sgRoles {
		if g, ok := have["sg-"+role]; ok {
			n.groups[role] = awssdk.ToString(g.GroupId)
			continue
		}
		p.log.Info("creating security group", "cluster", c.Project+"/"+c.Name, "role", role)
		made, err := c.api.ec2.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: awssdk.String(c.short(role)),
			Description: awssdk.String("Kiln cluster " + c.Name + ": " + role), VpcId: &n.vpc,
			TagSpecifications: c.tagSpec(ec2types.ResourceTypeSecurityGroup, "sg-"+role)})
		if err != nil {
			return classify(err, "", "create the %s security group of cluster %s", role, c.Name)
		}
		n.groups[role] = awssdk.ToString(made.GroupId)
	}
	if len(have) < len(sgRoles) {
		if err := visible(ctx, "the security groups of cluster "+c.Name, func() (bool, error) {
			out, err := c.api.ec2.DescribeSecurityGroups(ctx, &ec2.DescribeSecurityGroupsInput{Filters: c.filter("")})
			return err == nil && len(out.SecurityGroups) >= len(sgRoles), err
		}); err != nil {
			return err
		}
	}
	for role, rules := range ingress() {
		g, existed := have["sg-"+role]
		var perms []ec2types.IpPermission
		for _, r := range rules {
			perm := ec2types.IpPermission{IpProtocol: awssdk.String(r.proto)}
			if r.proto != "-1" {
				perm.FromPort, perm.ToPort = awssdk.Int32(r.from), awssdk.Int32(r.to)
			}
			switch {
			case r.group != "":
				perm.UserIdGroupPairs = []ec2types.UserIdGroupPair{{GroupId: awssdk.String(n.groups[r.group]), Description: awssdk.String(r.what)}}
			case r.vpcPrivate:
				perm.IpRanges = []ec2types.IpRange{{CidrIp: awssdk.String(n.cidr.String()), Description: awssdk.String(r.what)}}
			default:
				perm.IpRanges = []ec2types.IpRange{{CidrIp: awssdk.String(r.cidr), Description: awssdk.String(r.what)}}
			}
			if existed && hasPermission(g.IpPermissions, perm) {
				continue
			}
			perms = append(perms, perm)
		}
		if len(perms) == 0 {
			continue
		}
		_, err := c.api.ec2.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{GroupId: awssdk.String(n.groups[role]), IpPermissions: perms})
		if err != nil && APICode(err) != "InvalidPermission.Duplicate" {
			return classify(err, "", "allow the %s security group's traffic in", role)
		}
	}
	return nil
}

// hasPermission reports whether perms already allow what want does.
func hasPermission(perms []ec2types.IpPermission, want ec2types.IpPermission) bool {
	for _, p := range perms {
		if awssdk.ToString(p.IpProtocol) != awssdk.ToString(want.IpProtocol) || awssdk.ToInt32(p.FromPort) != awssdk.ToInt32(want.FromPort) ||
			awssdk.ToInt32(p.ToPort) != awssdk.ToInt32(want.ToPort) {
			continue
		}
		for _, r := range want.IpRanges {
			for _, h := range p.IpRanges {
				if awssdk.ToString(h.CidrIp) == awssdk.ToString(r.CidrIp) {
					return true
				}
			}
		}
		for _, g := range want.UserIdGroupPairs {
			for _, h := range p.UserIdGroupPairs {
				if awssdk.ToString(h.GroupId) == awssdk.ToString(g.GroupId) {
					return true
				}
			}
		}
	}
	return false
}

// ensureKeyPair makes the cluster's key pair, which the bastion and the
// nodes are launched with.
//
// Its private key is AWS's answer to the create and is not kept yet: SSH
// through the bastion is not offered (docs/provider-aws.md).
func (p *AWS) ensureKeyPair(ctx context.Context, c *cluster) error {
	name := c.short("key")
	_, err := c.api.ec2.DescribeKeyPairs(ctx, &ec2.DescribeKeyPairsInput{KeyNames: []string{name}})
	if err == nil {
		return nil
	}
	if APICode(err) != "InvalidKeyPair.NotFound" {
		return classify(err, "", "find the key pair of cluster %s", c.Name)
	}
	_, err = c.api.ec2.CreateKeyPair(ctx, &ec2.CreateKeyPairInput{KeyName: &name, KeyType: ec2types.KeyTypeEd25519,
		TagSpecifications: c.tagSpec(ec2types.ResourceTypeKeyPair, "key")})
	if err != nil && APICode(err) != "InvalidKeyPair.Duplicate" {
		return classify(err, "", "create the key pair of cluster %s", c.Name)
	}
	return nil
}

// Node roles: what each kind of node may do with its instance profile.
const assumeEC2 = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}`

var nodePolicies = map[string]string{
	sgControlPlane: `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["ec2:DescribeInstances","ec2:DescribeRegions","ec2:DescribeRouteTables","ec2:DescribeSecurityGroups","ec2:DescribeSubnets","ec2:DescribeVolumes","elasticloadbalancing:DescribeLoadBalancers","elasticloadbalancing:DescribeTargetGroups","elasticloadbalancing:DescribeTargetHealth"],"Resource":"*"}]}`,
	sgWorker:       `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["ec2:DescribeInstances","ec2:DescribeRegions"],"Resource":"*"}]}`,
}

// nodePolicy is a node role's policy: nodePolicies', and the reading of
// the staging object when the account names a staging bucket.
func (c *cluster) nodePolicy(role string) string {
	doc := nodePolicies[role]
	if st := c.stagingStatement(); st != "" {
		doc = strings.TrimSuffix(doc, "]}") + "," + st + "]}"
	}
	return doc
}

// roleName is the IAM role and instance profile of a node role.
func (c *cluster) roleName(role string) string { return c.short(role) }

// ensureRoles makes the IAM role and instance profile of control-plane
// and worker nodes, each with the least it needs to describe its
// neighbours.
func (p *AWS) ensureRoles(ctx context.Context, c *cluster) error {
	for _, role := range []string{sgControlPlane, sgWorker} {
		name := c.roleName(role)
		_, err := c.api.iam.GetRole(ctx, &iam.GetRoleInput{RoleName: &name})
		var missing *iamtypes.NoSuchEntityException
		switch {
		case errors.As(err, &missing):
			p.log.Info("creating IAM role", "cluster", c.Project+"/"+c.Name, "role", name)
			var tags []iamtypes.Tag
			for k, v := range c.tags("role-" + role) {
				tags = append(tags, iamtypes.Tag{Key: awssdk.String(k), Value: awssdk.String(v)})
			}
			if _, err := c.api.iam.CreateRole(ctx, &iam.CreateRoleInput{RoleName: &name, AssumeRolePolicyDocument: awssdk.String(assumeEC2),
				Description: awssdk.String("Kiln cluster " + c.Name + ": " + role + " nodes"), Tags: tags}); err != nil && APICode(err) != "EntityAlreadyExists" {
				return classify(err, "", "create the IAM role %s", name)
			}
		case err != nil:
			return classify(err, "", "find the IAM role %s", name)
		}
		if _, err := c.api.iam.PutRolePolicy(ctx, &iam.PutRolePolicyInput{RoleName: &name, PolicyName: awssdk.String("kiln-node"),
			PolicyDocument: awssdk.String(c.nodePolicy(role))}); err != nil {
			return classify(err, "", "give the IAM role %s its policy", name)
		}
		prof, err := c.api.iam.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: &name})
		switch {
		case errors.As(err, &missing):
			if _, err := c.api.iam.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: &name}); err != nil && APICode(err) != "EntityAlreadyExists" {
				return classify(err, "", "create the instance profile %s", name)
			}
		case err != nil:
			return classify(err, "", "find the instance profile %s", name)
		}
		if err == nil && len(prof.InstanceProfile.Roles) > 0 {
			continue
		}
		if _, err := c.api.iam.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: &name, RoleName: &name}); err != nil && APICode(err) != "LimitExceeded" {
			return classify(err, "", "put the IAM role %s in its instance profile", name)
		}
	}
	return nil
}
