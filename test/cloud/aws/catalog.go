package aws

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// instanceTypes is the local AWS's catalogue of instance types: a few of
// AWS's, with their vCPUs and memory as AWS gives them.
var instanceTypes = []struct {
	Name      string
	VCPUs     int
	MemoryMiB int
}{
	{"t3.micro", 2, 1024},
	{"t3.small", 2, 2048},
	{"t3.medium", 2, 4096},
	{"t3.large", 2, 8192},
	{"m5.large", 2, 8192},
	{"m5.xlarge", 4, 16384},
	{"c5.large", 2, 4096},
	{"c5.xlarge", 4, 8192},
}

// notOffered is the catalogue's one gap, so that clients can meet "this
// type is not offered in this zone": c5.xlarge is in no region's zone c.
const notOfferedType, notOfferedZoneSuffix = "c5.xlarge", "c"

// instanceTypeOf is an instance type's vCPUs and memory; ok false for a
// type the catalogue does not have.
func instanceTypeOf(name string) (vcpus, memoryMiB int, ok bool) {
	for _, t := range instanceTypes {
		if t.Name == name {
			return t.VCPUs, t.MemoryMiB, true
		}
	}
	return 0, 0, false
}

// offered reports whether an instance type can be launched in zone: it is
// in the catalogue and zone is not the gap.
func offered(instanceType, zone string) bool {
	if _, _, ok := instanceTypeOf(instanceType); !ok {
		return false
	}
	return !(instanceType == notOfferedType && strings.HasSuffix(zone, notOfferedZoneSuffix))
}

// zones are a region's availability zones: REGION+a, b and c.
func (s *Server) zones(region string) []string {
	return []string{region + "a", region + "b", region + "c"}
}

// zoneID is a zone's id as AWS shapes them (us-east-1a is use1-az1):
// the region's short name and the zone's number. (AWS maps names to ids
// per account; here the map is the same for everyone.)
func zoneID(zone string) string {
	if zone == "" {
		return ""
	}
	region, letter := zone[:len(zone)-1], zone[len(zone)-1]
	parts := strings.Split(region, "-")
	short := map[string]string{"north": "n", "south": "s", "east": "e", "west": "w", "central": "c",
		"northeast": "ne", "northwest": "nw", "southeast": "se", "southwest": "sw"}
	id := ""
	for i, p := range parts {
		switch {
		case i == 0 || i == len(parts)-1:
			id += p
		case short[p] != "":
			id += short[p]
		default:
			id += p[:1]
		}
	}
	return id + "-az" + strconv.Itoa(int(letter-'a')+1)
}

// catalogActions are EC2's descriptions of what there is: regions, zones,
// instance types and their offerings, the account's limits.
func (s *Server) catalogActions() map[string]queryAction {
	return map[string]queryAction{
		"DescribeRegions":               read(s.describeRegions),
		"DescribeAvailabilityZones":     read(s.describeAvailabilityZones),
		"DescribeInstanceTypes":         read(s.describeInstanceTypes),
		"DescribeInstanceTypeOfferings": read(s.describeInstanceTypeOfferings),
		"DescribeAccountAttributes":     read(s.describeAccountAttributes),
	}
}

// filtered applies Filter.N to a value that is not a stored resource (no
// tags), field giving its values for a filter name.
func (s *Server) filtered(c *call, field func(name string) ([]string, bool)) (bool, error) {
	return s.matches("", filters(c.p), field)
}

func (s *Server) describeRegions(c *call) (any, error) {
	type region struct {
		Name     string `xml:"regionName"`
		Endpoint string `xml:"regionEndpoint"`
		OptIn    string `xml:"optInStatus"`
	}
	var out struct {
		Regions []region `xml:"regionInfo>item"`
	}
	names := c.p.List("RegionName")
	for _, n := range names {
		if !slices.Contains(s.opts.Regions, n) {
			return nil, errorf(http.StatusBadRequest, "InvalidParameterValue", "Invalid region: %s", n)
		}
	}
	for _, r := range s.opts.Regions {
		x := region{r, "ec2." + r + ".amazonaws.com", "opt-in-not-required"}
		ok, err := s.filtered(c, func(name string) ([]string, bool) {
			switch name {
			case "region-name":
				return one(x.Name)
			case "endpoint":
				return one(x.Endpoint)
			case "opt-in-status":
				return one(x.OptIn)
			}
			return nil, false
		})
		if err != nil {
			return nil, err
		}
		if ok && (len(names) == 0 || slices.Contains(names, r)) {
			out.Regions = append(out.Regions, x)
		}
	}
	return out, nil
}

func (s *Server) describeAvailabilityZones(c *call) (any, error) {
	type zone struct {
		Name        string `xml:"zoneName"`
		ID          string `xml:"zoneId"`
		State       string `xml:"zoneState"`
		Region      string `xml:"regionName"`
		Group       string `xml:"groupName"`
		BorderGroup string `xml:"networkBorderGroup"`
		OptIn       string `xml:"optInStatus"`
		Type        string `xml:"zoneType"`
	}
	var out struct {
		Zones []zone `xml:"availabilityZoneInfo>item"`
	}
	names, ids := c.p.List("ZoneName"), c.p.List("ZoneId")
	for _, z := range s.zones(c.region) {
		x := zone{z, zoneID(z), "available", c.region, c.region, c.region, "opt-in-not-required", "availability-zone"}
		ok, err := s.filtered(c, func(name string) ([]string, bool) {
			switch name {
			case "zone-name":
				return one(x.Name)
			case "zone-id":
				return one(x.ID)
			case "state":
				return one(x.State)
			case "region-name":
				return one(x.Region)
			case "zone-type":
				return one(x.Type)
			case "group-name":
				return one(x.Group)
			}
			return nil, false
		})
		if err != nil {
			return nil, err
		}
		if ok && (len(names)+len(ids) == 0 || slices.Contains(names, z) || slices.Contains(ids, x.ID)) {
			out.Zones = append(out.Zones, x)
		}
	}
	for _, n := range names {
		if !slices.Contains(s.zones(c.region), n) {
			return nil, invalidParameter("The zone '%s' does not exist.", n)
		}
	}
	return out, nil
}

type xmlInstanceType struct {
	Type         string   `xml:"instanceType"`
	CurrentGen   bool     `xml:"currentGeneration"`
	VCPUs        int      `xml:"vCpuInfo>defaultVCpus"`
	Cores        int      `xml:"vCpuInfo>defaultCores"`
	Threads      int      `xml:"vCpuInfo>defaultThreadsPerCore"`
	MemoryMiB    int      `xml:"memoryInfo>sizeInMiB"`
	Archs        []string `xml:"processorInfo>supportedArchitectures>item"`
	UsageClasses []string `xml:"supportedUsageClasses>item"`
	Hypervisor   string   `xml:"hypervisor"`
	Burstable    bool     `xml:"burstablePerformanceSupported"`
}

func (s *Server) describeInstanceTypes(c *call) (any, error) {
	want := c.p.List("InstanceType")
	var unknown []string
	for _, t := range want {
		if _, _, ok := instanceTypeOf(t); !ok {
			unknown = append(unknown, t)
		}
	}
	if len(unknown) > 0 {
		return nil, errorf(http.StatusBadRequest, "InvalidInstanceType", "The following supplied instance types do not exist: [%s]", strings.Join(unknown, ", "))
	}
	var out struct {
		Types []xmlInstanceType `xml:"instanceTypeSet>item"`
	}
	for _, t := range instanceTypes {
		x := xmlInstanceType{Type: t.Name, CurrentGen: true, VCPUs: t.VCPUs, Cores: t.VCPUs / 2, Threads: 2, MemoryMiB: t.MemoryMiB,
			Archs: []string{"x86_64"}, UsageClasses: []string{"on-demand", "spot"}, Hypervisor: "nitro",
			Burstable: strings.HasPrefix(t.Name, "t3.")}
		ok, err := s.filtered(c, func(name string) ([]string, bool) {
			switch name {
			case "instance-type":
				return one(x.Type)
			case "vcpu-info.default-vcpus":
				return one(strconv.Itoa(x.VCPUs))
			case "memory-info.size-in-mib":
				return one(strconv.Itoa(x.MemoryMiB))
			case "current-generation":
				return one("true")
			case "processor-info.supported-architecture":
				return x.Archs, true
			case "burstable-performance-supported":
				return one(strconv.FormatBool(x.Burstable))
			}
			return nil, false
		})
		if err != nil {
			return nil, err
		}
		if ok && (len(want) == 0 || slices.Contains(want, t.Name)) {
			out.Types = append(out.Types, x)
		}
	}
	return out, nil
}

func (s *Server) describeInstanceTypeOfferings(c *call) (any, error) {
	type offering struct {
		Type         string `xml:"instanceType"`
		LocationType string `xml:"locationType"`
		Location     string `xml:"location"`
	}
	var out struct {
		Offerings []offering `xml:"instanceTypeOfferingSet>item"`
	}
	lt := c.p.Get("LocationType")
	if lt == "" {
		lt = "region"
	}
	var locations []string
	switch lt {
	case "region":
		locations = []string{c.region}
	case "availability-zone", "availability-zone-id":
		locations = s.zones(c.region)
	default:
		return nil, invalidParameter("Value (%s) for parameter locationType is invalid.", lt)
	}
	for _, loc := range locations {
		for _, t := range instanceTypes {
			if lt != "region" && !offered(t.Name, loc) {
				continue
			}
			x := offering{t.Name, lt, loc}
			if lt == "availability-zone-id" {
				x.Location = zoneID(loc)
			}
			ok, err := s.filtered(c, func(name string) ([]string, bool) {
				switch name {
				case "instance-type":
					return one(x.Type)
				case "location":
					return one(x.Location)
				}
				return nil, false
			})
			if err != nil {
				return nil, err
			}
			if ok {
				out.Offerings = append(out.Offerings, x)
			}
		}
	}
	return out, nil
}

func (s *Server) describeAccountAttributes(c *call) (any, error) {
	type value struct {
		Value string `xml:"attributeValue"`
	}
	type attribute struct {
		Name   string  `xml:"attributeName"`
		Values []value `xml:"attributeValueSet>item"`
	}
	all := []attribute{
		{"supported-platforms", []value{{"VPC"}}},
		{"default-vpc", []value{{"none"}}},
		{"max-instances", []value{{"20"}}},
		{"max-elastic-ips", []value{{strconv.Itoa(maxAddresses)}}},
		{"vpc-max-elastic-ips", []value{{strconv.Itoa(maxAddresses)}}},
		{"vpc-max-security-groups-per-interface", []value{{"5"}}},
	}
	want := c.p.List("AttributeName")
	var out struct {
		Attributes []attribute `xml:"accountAttributeSet>item"`
	}
	for _, a := range all {
		if len(want) == 0 || slices.Contains(want, a.Name) {
			out.Attributes = append(out.Attributes, a)
		}
	}
	return out, nil
}
