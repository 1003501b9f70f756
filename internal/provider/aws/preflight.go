package aws

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/servicequotas"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider"
)

var _ provider.Preflighter = (*AWS)(nil)

// placeholder ids for dry runs: EC2 checks the permission before the ids.
const (
	dryVPC    = "vpc-0000000000000000a"
	drySubnet = "subnet-0000000000000000a"
	dryGroup  = "sg-0000000000000000a"
	dryTable  = "rtb-0000000000000000a"
)

// dryRun is one EC2 call the create makes, asked with DryRun.
type dryRun struct {
	action string
	call   func(ctx context.Context, api *ec2.Client) error
}

func dryRuns() []dryRun {
	t := awssdk.Bool(true)
	return []dryRun{
		{"CreateVpc", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.CreateVpc(ctx, &ec2.CreateVpcInput{DryRun: t, CidrBlock: awssdk.String("10.0.0.0/16")})
			return err
		}},
		{"CreateSubnet", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.CreateSubnet(ctx, &ec2.CreateSubnetInput{DryRun: t, VpcId: awssdk.String(dryVPC), CidrBlock: awssdk.String("10.0.0.0/20")})
			return err
		}},
		{"CreateInternetGateway", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.CreateInternetGateway(ctx, &ec2.CreateInternetGatewayInput{DryRun: t})
			return err
		}},
		{"AllocateAddress", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.AllocateAddress(ctx, &ec2.AllocateAddressInput{DryRun: t, Domain: ec2types.DomainTypeVpc})
			return err
		}},
		{"CreateNatGateway", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.CreateNatGateway(ctx, &ec2.CreateNatGatewayInput{DryRun: t, SubnetId: awssdk.String(drySubnet)})
			return err
		}},
		{"CreateRouteTable", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.CreateRouteTable(ctx, &ec2.CreateRouteTableInput{DryRun: t, VpcId: awssdk.String(dryVPC)})
			return err
		}},
		{"CreateRoute", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.CreateRoute(ctx, &ec2.CreateRouteInput{DryRun: t, RouteTableId: awssdk.String(dryTable), DestinationCidrBlock: awssdk.String("0.0.0.0/0")})
			return err
		}},
		{"CreateSecurityGroup", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{DryRun: t, GroupName: awssdk.String("kiln-dry-run"), Description: awssdk.String("dry run"), VpcId: awssdk.String(dryVPC)})
			return err
		}},
		{"AuthorizeSecurityGroupIngress", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.AuthorizeSecurityGroupIngress(ctx, &ec2.AuthorizeSecurityGroupIngressInput{DryRun: t, GroupId: awssdk.String(dryGroup)})
			return err
		}},
		{"CreateKeyPair", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.CreateKeyPair(ctx, &ec2.CreateKeyPairInput{DryRun: t, KeyName: awssdk.String("kiln-dry-run")})
			return err
		}},
		{"RunInstances", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.RunInstances(ctx, &ec2.RunInstancesInput{DryRun: t, ImageId: awssdk.String("ami-0000000000000000a"),
				InstanceType: DefaultInstanceType, MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), SubnetId: awssdk.String(drySubnet)})
			return err
		}},
		{"CreateLaunchTemplate", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{DryRun: t, LaunchTemplateName: awssdk.String("kiln-dry-run"),
				LaunchTemplateData: &ec2types.RequestLaunchTemplateData{ImageId: awssdk.String("ami-0000000000000000a"), InstanceType: DefaultInstanceType}})
			return err
		}},
		{"TerminateInstances", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.TerminateInstances(ctx, &ec2.TerminateInstancesInput{DryRun: t, InstanceIds: []string{"i-0000000000000000a"}})
			return err
		}},
		{"DeleteVpc", func(ctx context.Context, e *ec2.Client) error {
			_, err := e.DeleteVpc(ctx, &ec2.DeleteVpcInput{DryRun: t, VpcId: awssdk.String(dryVPC)})
			return err
		}},
	}
}

// Preflight checks, before anything is made, what EC2 lets the cluster's
// account check: each EC2 call the create and delete make, asked with
// DryRun (a missing permission is named), the Elastic IP headroom for a
// NAT gateway per zone, and the vCPU quota (vcpuFinding). IAM and Elastic Load Balancing have no dry run;
// their permissions show when the create calls them.
func (p *AWS) Preflight(ctx context.Context, pc provider.Cluster) ([]v1.Error, error) {
	c, err := p.cluster(pc)
	if err != nil {
		return nil, err
	}
	var findings []v1.Error
	for _, d := range dryRuns() {
		err := d.call(ctx, c.api.ec2)
		switch code := APICode(err); code {
		case "DryRunOperation":
		case "UnauthorizedOperation":
			findings = append(findings, v1.Error{Code: v1.CodeForbidden, Target: "spec.cloudAccount",
				Message: fmt.Sprintf("the credentials of cloud account %q may not call ec2:%s, which the cluster needs; grant it", c.Account.Name, d.action)})
		case "", "RequestLimitExceeded", "AuthFailure":
			if err != nil { // the check could not be made
				return nil, classify(err, "", "dry-run ec2:%s", d.action)
			}
		default:
			// Another answer (an id EC2 checked before the permission) says
			// nothing about the permission: the create asks for real.
		}
	}
	zones, err := p.clusterZones(ctx, c)
	if err != nil {
		return nil, err
	}
	offered, err := p.zoneOfferings(ctx, c)
	if err != nil {
		return nil, err
	}
	findings = append(findings, checkZoneOfferings(c.Spec, zones, offered)...)
	headroom, err := p.addressHeadroom(ctx, c)
	if err != nil {
		return nil, err
	}
	// The cluster's own, by name: a dry run has no cluster id yet.
	mine, err := c.api.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{Filters: []ec2types.Filter{
		{Name: awssdk.String("tag:" + TagProject), Values: []string{c.Project}},
		{Name: awssdk.String("tag:" + TagName), Values: []string{c.Name}},
		{Name: awssdk.String("tag:" + TagPart), Values: []string{partEIP}}}})
	if err != nil {
		return nil, classify(err, "", "count the Elastic IPs of cluster %s", c.Name)
	}
	if c.adopted() {
		// No NAT gateway of the cluster's own: the VPC is checked instead.
		f, err := p.existingFindings(ctx, c)
		if err != nil {
			return nil, err
		}
		findings = append(findings, f...)
	} else if need := len(zones) - len(mine.Addresses); headroom >= 0 && need > headroom {
		findings = append(findings, v1.Error{Code: v1.CodeQuotaExceeded, Target: "spec.controlPlane.zones",
			Message: fmt.Sprintf("region %s has room for %d more Elastic IPs and the cluster needs %d more (a NAT gateway in each of its %d zones); release some or ask AWS for more", c.api.region, headroom, need, len(zones))})
	}
	for _, check := range []func(context.Context, *cluster) (*v1.Error, error){p.vcpuFinding, p.checkStaging} {
		f, err := check(ctx, c)
		if err != nil {
			return nil, err
		}
		if f != nil {
			findings = append(findings, *f)
		}
	}
	return findings, nil
}

// QuotaStandardVCPUs is Service Quotas' code of EC2's quota of vCPUs for
// running on-demand standard (A, C, D, H, I, M, R, T, Z) instances.
const QuotaStandardVCPUs = "L-1216C47A"

// vcpuFinding checks the region's vCPU quota for on-demand instances
// (Service Quotas) against what the cluster still needs: the vCPUs of the
// machines the spec wants (spot pools count against another quota) and the
// bastion, less those of the cluster's live instances, must fit in the
// quota less what runs in the region. The finding names the largest part
// of the cluster. A key that may not read the quota skips the check
// (logged): a launch beyond it fails, naming the field.
func (p *AWS) vcpuFinding(ctx context.Context, c *cluster) (*v1.Error, error) {
	q, err := c.api.quotas.GetServiceQuota(ctx, &servicequotas.GetServiceQuotaInput{ServiceCode: awssdk.String("ec2"), QuotaCode: awssdk.String(QuotaStandardVCPUs)})
	if code := APICode(err); code == "AccessDeniedException" || code == "NoSuchResourceException" {
		p.log.Warn("the vCPU quota cannot be read; not checked", "cluster", c.Project+"/"+c.Name, "code", code)
		return nil, nil
	}
	if err != nil {
		return nil, classify(err, "", "read the vCPU quota of region %s", c.api.region)
	}
	quota := int(awssdk.ToFloat64(q.Quota.Value))
	running, err := c.instancesBy(ctx, []ec2types.Filter{{Name: awssdk.String("instance-state-name"), Values: live}})
	if err != nil {
		return nil, err
	}
	type part struct {
		at           string
		count        int
		instanceType string
	}
	parts := []part{{"spec.controlPlane.size", c.Spec.ControlPlane.Size, cmp.Or(c.Spec.ControlPlane.InstanceType, DefaultInstanceType)},
		{"bastion", 1, BastionInstanceType}}
	for i, wp := range c.Spec.WorkerPools {
		if wp.Spot == nil {
			parts = append(parts, part{fmt.Sprintf("spec.workerPools[%d].size", i), wp.Size, cmp.Or(wp.InstanceType, DefaultInstanceType)})
		}
	}
	var types []ec2types.InstanceType
	for _, pt := range parts {
		types = append(types, ec2types.InstanceType(pt.instanceType))
	}
	for _, i := range running {
		types = append(types, i.InstanceType)
	}
	slices.Sort(types)
	out, err := c.api.ec2.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: slices.Compact(types)})
	if APICode(err) == "InvalidInstanceType" {
		return nil, nil // a type AWS does not have: the offerings' finding names it
	}
	if err != nil {
		return nil, classify(err, "", "read the vCPUs of instance types %v", slices.Compact(types))
	}
	vcpus := map[ec2types.InstanceType]int{}
	for _, t := range out.InstanceTypes {
		if t.VCpuInfo != nil {
			vcpus[t.InstanceType] = int(awssdk.ToInt32(t.VCpuInfo.DefaultVCpus))
		}
	}
	used, mine := 0, 0
	for _, i := range running {
		if i.InstanceLifecycle == ec2types.InstanceLifecycleTypeSpot {
			continue
		}
		used += vcpus[i.InstanceType]
		if tagOf(i.Tags, TagProject) == c.Project && tagOf(i.Tags, TagName) == c.Name {
			mine += vcpus[i.InstanceType]
		}
	}
	need, largest := 0, parts[0]
	for _, pt := range parts {
		need += pt.count * vcpus[ec2types.InstanceType(pt.instanceType)]
		if pt.at != "bastion" && pt.count*vcpus[ec2types.InstanceType(pt.instanceType)] > largest.count*vcpus[ec2types.InstanceType(largest.instanceType)] {
			largest = pt
		}
	}
	if more, room := need-mine, quota-used; more > room {
		return &v1.Error{Code: v1.CodeQuotaExceeded, Target: largest.at, Message: fmt.Sprintf(
			"the cluster needs %d vCPUs more for on-demand instances and region %s has room for %d (quota %s: %d, %d in use); ask AWS for a higher quota or make the cluster smaller",
			more, c.api.region, max(room, 0), QuotaStandardVCPUs, quota, used)}, nil
	}
	return nil, nil
}

// addressHeadroom is how many more Elastic IPs the account may allocate in
// the region (the account attribute vpc-max-elastic-ips less those
// allocated), -1 when AWS does not say.
func (p *AWS) addressHeadroom(ctx context.Context, c *cluster) (int, error) {
	attrs, err := c.api.ec2.DescribeAccountAttributes(ctx, &ec2.DescribeAccountAttributesInput{AttributeNames: []ec2types.AccountAttributeName{"vpc-max-elastic-ips"}})
	if err != nil {
		return 0, classify(err, "", "read the Elastic IP limit of region %s", c.api.region)
	}
	limit := -1
	for _, a := range attrs.AccountAttributes {
		for _, v := range a.AttributeValues {
			if n, err := strconv.Atoi(awssdk.ToString(v.AttributeValue)); err == nil {
				limit = n
			}
		}
	}
	if limit < 0 {
		return -1, nil
	}
	addrs, err := c.api.ec2.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{})
	if err != nil {
		return 0, classify(err, "", "count the Elastic IPs of region %s", c.api.region)
	}
	return limit - len(addrs.Addresses), nil
}

// zoneOfferings are the instance types AWS offers in each zone of the
// region.
func (p *AWS) zoneOfferings(ctx context.Context, c *cluster) (map[string][]string, error) {
	out, err := c.api.ec2.DescribeInstanceTypeOfferings(ctx, &ec2.DescribeInstanceTypeOfferingsInput{LocationType: ec2types.LocationTypeAvailabilityZone})
	if err != nil {
		return nil, classify(err, "", "list the instance types of region %s", c.api.region)
	}
	byZone := map[string][]string{}
	for _, off := range out.InstanceTypeOfferings {
		z := awssdk.ToString(off.Location)
		byZone[z] = append(byZone[z], string(off.InstanceType))
	}
	return byZone, nil
}

// checkZoneOfferings finds the machines whose instance type AWS does not
// offer in a zone they may go to: the zones the spec names for them, or
// the cluster's.
func checkZoneOfferings(spec v1.ClusterSpec, clusterZones []string, offered map[string][]string) []v1.Error {
	type group struct {
		at, instanceType string
		zones            []string
	}
	groups := []group{{"spec.controlPlane", spec.ControlPlane.InstanceType, spec.ControlPlane.Zones}}
	for i, wp := range spec.WorkerPools {
		groups = append(groups, group{fmt.Sprintf("spec.workerPools[%d]", i), wp.InstanceType, wp.Zones})
	}
	var findings []v1.Error
	for _, g := range groups {
		t := cmp.Or(g.instanceType, DefaultInstanceType)
		zones := g.zones
		if len(zones) == 0 {
			zones = clusterZones
		}
		var missing []string
		for _, z := range zones {
			if !slices.Contains(offered[z], t) {
				missing = append(missing, z)
			}
		}
		if len(missing) > 0 {
			findings = append(findings, v1.Error{Code: v1.CodeInvalidParameter, Target: g.at + ".instanceType",
				Message: fmt.Sprintf("AWS does not offer instance type %s in %s; choose another type, or zones that offer it", t, strings.Join(missing, ", "))})
		}
	}
	return findings
}
