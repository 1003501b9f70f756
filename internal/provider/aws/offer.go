package aws

import (
	"context"
	"slices"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"kiln.dev/kiln/internal/provider"
)

// Describe checks the account's credentials (STS GetCallerIdentity) and
// returns what AWS offers it in region: the regions, the region's zones and
// the instance types offered in any of them (Preflight checks each type in
// the zones its machines go to).
func (p *AWS) Describe(ctx context.Context, a *provider.Account, region string) (provider.Offer, error) {
	api, err := p.clientsFor(a, region)
	if err != nil {
		return provider.Offer{}, err
	}
	if _, err := api.sts.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{}); err != nil {
		return provider.Offer{}, classify(err, "spec.cloudAccount", "check the credentials of cloud account %q", a.Name)
	}
	regions, err := api.ec2.DescribeRegions(ctx, &ec2.DescribeRegionsInput{})
	if err != nil {
		return provider.Offer{}, classify(err, "spec.region", "list the regions of cloud account %q", a.Name)
	}
	o := provider.Offer{Spot: true, LoadBalancers: true, DefaultInstanceType: DefaultInstanceType, NodeNetwork: DefaultVPCCIDR, ExistingNetworks: true}
	for _, r := range regions.Regions {
		o.Regions = append(o.Regions, awssdk.ToString(r.RegionName))
	}
	slices.Sort(o.Regions)
	if !slices.Contains(o.Regions, api.region) {
		return o, nil // the spec's region is checked against o.Regions
	}
	if o.Zones, err = p.regionZones(ctx, api); err != nil {
		return provider.Offer{}, err
	}
	offerings, err := api.ec2.DescribeInstanceTypeOfferings(ctx, &ec2.DescribeInstanceTypeOfferingsInput{LocationType: ec2types.LocationTypeAvailabilityZone})
	if err != nil {
		return provider.Offer{}, classify(err, "", "list the instance types of region %s", api.region)
	}
	var offered []ec2types.InstanceType
	for _, off := range offerings.InstanceTypeOfferings {
		if !slices.Contains(offered, off.InstanceType) {
			offered = append(offered, off.InstanceType)
		}
	}
	if len(offered) == 0 {
		return o, nil
	}
	types, err := api.ec2.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: offered})
	if err != nil {
		return provider.Offer{}, classify(err, "", "describe the instance types of region %s", api.region)
	}
	for _, t := range types.InstanceTypes {
		it := provider.InstanceType{Name: string(t.InstanceType)}
		if t.VCpuInfo != nil {
			it.VCPUs = int(awssdk.ToInt32(t.VCpuInfo.DefaultVCpus))
		}
		if t.MemoryInfo != nil {
			it.MemoryMiB = int(awssdk.ToInt64(t.MemoryInfo.SizeInMiB))
		}
		o.InstanceTypes = append(o.InstanceTypes, it)
	}
	slices.SortFunc(o.InstanceTypes, func(a, b provider.InstanceType) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return o, nil
}
