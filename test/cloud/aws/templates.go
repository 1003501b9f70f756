package aws

import (
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// launchTemplate is an EC2 launch template and its versions.
type launchTemplate struct {
	ID       string             `json:"id"`
	Name     string             `json:"name"`
	Region   string             `json:"region"`
	Created  time.Time          `json:"created"`
	Default  int                `json:"default"`
	Latest   int                `json:"latest"`
	Versions []*templateVersion `json:"versions"`
}

// templateVersion is one version of a launch template.
type templateVersion struct {
	Number      int          `json:"number"`
	Description string       `json:"description,omitempty"`
	Created     time.Time    `json:"created"`
	Data        templateData `json:"data"`
}

// templateData is a version's LaunchTemplateData: what it launches.
type templateData struct {
	ImageID        string            `json:"imageId,omitempty"`
	InstanceType   string            `json:"instanceType,omitempty"`
	KeyName        string            `json:"keyName,omitempty"`
	UserData       string            `json:"userData,omitempty"`
	Profile        string            `json:"profile,omitempty"`
	SecurityGroups []string          `json:"securityGroups,omitempty"`
	Tags           map[string]string `json:"tags,omitempty"`
	Spot           bool              `json:"spot,omitempty"`
	MaxPrice       string            `json:"maxPrice,omitempty"`
	HostnameType   string            `json:"hostnameType,omitempty"`
}

func (d templateData) spec() launchSpec {
	return launchSpec{ImageID: d.ImageID, InstanceType: d.InstanceType, KeyName: d.KeyName, UserData: d.UserData,
		Profile: d.Profile, SecurityGroups: slices.Clone(d.SecurityGroups), Tags: d.Tags, Spot: d.Spot, MaxPrice: d.MaxPrice, HostnameType: d.HostnameType}
}

func dataOf(l launchSpec) templateData {
	return templateData{ImageID: l.ImageID, InstanceType: l.InstanceType, KeyName: l.KeyName, UserData: l.UserData,
		Profile: l.Profile, SecurityGroups: l.SecurityGroups, Tags: l.Tags, Spot: l.Spot, MaxPrice: l.MaxPrice, HostnameType: l.HostnameType}
}

// version returns version n (nil when there is none).
func (t *launchTemplate) version(n int) *templateVersion {
	for _, v := range t.Versions {
		if v.Number == n {
			return v
		}
	}
	return nil
}

// sub is the parameters under prefix, with prefix taken off the keys.
func (p params) sub(prefix string) params {
	out := params{}
	for k, v := range p {
		if rest, ok := strings.CutPrefix(k, prefix+"."); ok {
			out[rest] = v
		}
	}
	return out
}

func (s *Server) templateActions() map[string]queryAction {
	return map[string]queryAction{
		"CreateLaunchTemplate":           do(s.createLaunchTemplate),
		"CreateLaunchTemplateVersion":    do(s.createLaunchTemplateVersion),
		"ModifyLaunchTemplate":           do(s.modifyLaunchTemplate),
		"DescribeLaunchTemplates":        read(s.describeLaunchTemplates),
		"DescribeLaunchTemplateVersions": read(s.describeLaunchTemplateVersions),
		"DeleteLaunchTemplate":           do(s.deleteLaunchTemplate),
	}
}

// findTemplate returns the region's launch template of an id (lt-...) or
// a name. Callers hold s.mu.
func (s *Server) findTemplate(region, idOrName string) (*launchTemplate, error) {
	for _, t := range s.st.EC2.Compute.Templates {
		if t.Region == region && (t.ID == idOrName || t.Name == idOrName) {
			return t, nil
		}
	}
	if strings.HasPrefix(idOrName, "lt-") {
		return nil, notFound(idOrName)
	}
	return nil, errorf(http.StatusBadRequest, "InvalidLaunchTemplateName.NotFoundException", "The specified launch template, with template name %s, does not exist.", idOrName)
}

// templateVersionOf resolves a template and a version ("", "$Default",
// "$Latest" or a number). Callers hold s.mu.
func (s *Server) templateVersionOf(region, idOrName, version string) (*launchTemplate, int, error) {
	t, err := s.findTemplate(region, idOrName)
	if err != nil {
		return nil, 0, err
	}
	n := t.Default
	switch version {
	case "", "$Default":
	case "$Latest":
		n = t.Latest
	default:
		if n, err = strconv.Atoi(version); err != nil {
			return nil, 0, errorf(http.StatusBadRequest, "InvalidLaunchTemplateId.VersionNotFound", "Could not find launch template version %s for template %s.", version, t.ID)
		}
	}
	if t.version(n) == nil {
		return nil, 0, errorf(http.StatusBadRequest, "InvalidLaunchTemplateId.VersionNotFound", "Could not find launch template version %s for template %s.", version, t.ID)
	}
	return t, n, nil
}

// templateSpec is what a launch template's version launches (Auto
// Scaling's launches). Callers hold s.mu.
func (s *Server) templateSpec(region, idOrName, version string) (launchSpec, error) {
	t, n, err := s.templateVersionOf(region, idOrName, version)
	if err != nil {
		return launchSpec{}, err
	}
	return t.version(n).Data.spec(), nil
}

// templateNamed is the template of a call's LaunchTemplateId or
// LaunchTemplateName.
func (s *Server) templateNamed(c *call) (*launchTemplate, error) {
	key := c.p.Get("LaunchTemplateId")
	if key == "" {
		key = c.p.Get("LaunchTemplateName")
	}
	if key == "" {
		return nil, errorf(http.StatusBadRequest, "MissingParameter", "The request must contain the parameter LaunchTemplateName or LaunchTemplateId")
	}
	return s.findTemplate(c.region, key)
}

func (s *Server) createLaunchTemplate(c *call) (any, error) {
	name, err := c.p.Required("LaunchTemplateName")
	if err != nil {
		return nil, err
	}
	if len(name) < 3 || len(name) > 128 {
		return nil, errorf(http.StatusBadRequest, "InvalidLaunchTemplateName.MalformedException", "A launch template name must be between 3 and 128 characters, and may contain letters, numbers, and the following characters: - ( ) . / _.")
	}
	for _, t := range s.st.EC2.Compute.Templates {
		if t.Region == c.region && t.Name == name {
			return nil, errorf(http.StatusBadRequest, "InvalidLaunchTemplateName.AlreadyExistsException", "Launch template name already in use.")
		}
	}
	now := s.opts.Now()
	t := &launchTemplate{ID: randomID("lt", 17), Name: name, Region: c.region, Created: now, Default: 1, Latest: 1}
	t.Versions = []*templateVersion{{Number: 1, Description: c.p.Get("VersionDescription"), Created: now,
		Data: dataOf(specOf(c.p.sub("LaunchTemplateData"), launchSpec{}))}}
	s.st.EC2.Compute.Templates[t.ID] = t
	s.tag(t.ID, tagSpecs(c.p, "launch-template"))
	return struct {
		T templateXML `xml:"launchTemplate"`
	}{s.templateXMLOf(c, t)}, nil
}

func (s *Server) createLaunchTemplateVersion(c *call) (any, error) {
	t, err := s.templateNamed(c)
	if err != nil {
		return nil, err
	}
	var base launchSpec
	if src := c.p.Get("SourceVersion"); src != "" {
		if base, err = s.templateSpec(c.region, t.ID, src); err != nil {
			return nil, err
		}
	}
	t.Latest++
	v := &templateVersion{Number: t.Latest, Description: c.p.Get("VersionDescription"), Created: s.opts.Now(),
		Data: dataOf(specOf(c.p.sub("LaunchTemplateData"), base))}
	t.Versions = append(t.Versions, v)
	return struct {
		V versionXML `xml:"launchTemplateVersion"`
	}{s.versionXMLOf(c, t, v)}, nil
}

func (s *Server) modifyLaunchTemplate(c *call) (any, error) {
	t, err := s.templateNamed(c)
	if err != nil {
		return nil, err
	}
	if d := c.p.Get("SetDefaultVersion"); d != "" {
		_, n, err := s.templateVersionOf(c.region, t.ID, d)
		if err != nil {
			return nil, err
		}
		t.Default = n
	}
	return struct {
		T templateXML `xml:"launchTemplate"`
	}{s.templateXMLOf(c, t)}, nil
}

func (s *Server) deleteLaunchTemplate(c *call) (any, error) {
	t, err := s.templateNamed(c)
	if err != nil {
		return nil, err
	}
	delete(s.st.EC2.Compute.Templates, t.ID)
	delete(s.st.EC2.Tags, t.ID)
	return struct {
		T templateXML `xml:"launchTemplate"`
	}{s.templateXMLOf(c, t)}, nil
}

func (s *Server) describeLaunchTemplates(c *call) (any, error) {
	var ts []*launchTemplate
	ids, names := c.p.List("LaunchTemplateId"), c.p.List("LaunchTemplateName")
	for _, key := range append(ids, names...) {
		t, err := s.findTemplate(c.region, key)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	if len(ids)+len(names) == 0 {
		for _, t := range s.st.EC2.Compute.Templates {
			if t.Region == c.region {
				ts = append(ts, t)
			}
		}
		sort.Slice(ts, func(a, b int) bool { return ts[a].Name < ts[b].Name })
	}
	var out struct {
		Items []templateXML `xml:"launchTemplates>item"`
	}
	fs := filters(c.p)
	for _, t := range ts {
		ok, err := s.matches(t.ID, fs, func(name string) ([]string, bool) {
			if name == "launch-template-name" {
				return []string{t.Name}, true
			}
			return nil, false
		})
		if err != nil {
			return nil, err
		}
		if ok {
			out.Items = append(out.Items, s.templateXMLOf(c, t))
		}
	}
	return out, nil
}

func (s *Server) describeLaunchTemplateVersions(c *call) (any, error) {
	t, err := s.templateNamed(c)
	if err != nil {
		return nil, err
	}
	var out struct {
		Items []versionXML `xml:"launchTemplateVersionSet>item"`
	}
	asked := c.p.List("LaunchTemplateVersion")
	if len(asked) == 0 {
		for _, v := range t.Versions {
			out.Items = append(out.Items, s.versionXMLOf(c, t, v))
		}
		return out, nil
	}
	for _, a := range asked {
		_, n, err := s.templateVersionOf(c.region, t.ID, a)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, s.versionXMLOf(c, t, t.version(n)))
	}
	return out, nil
}

// templateXML is a LaunchTemplate in EC2's answers.
type templateXML struct {
	ID        string   `xml:"launchTemplateId"`
	Name      string   `xml:"launchTemplateName"`
	Created   string   `xml:"createTime"`
	CreatedBy string   `xml:"createdBy"`
	Default   int64    `xml:"defaultVersionNumber"`
	Latest    int64    `xml:"latestVersionNumber"`
	Tags      []ec2Tag `xml:"tagSet>item"`
}

func (s *Server) templateXMLOf(c *call, t *launchTemplate) templateXML {
	return templateXML{ID: t.ID, Name: t.Name, Created: t.Created.UTC().Format(time.RFC3339),
		CreatedBy: "arn:aws:iam::" + c.account() + ":user/" + c.sig.cred.User,
		Default:   int64(t.Default), Latest: int64(t.Latest), Tags: s.tagItems(t.ID)}
}

// versionXML is a LaunchTemplateVersion in EC2's answers.
type versionXML struct {
	ID          string  `xml:"launchTemplateId"`
	Name        string  `xml:"launchTemplateName"`
	Number      int64   `xml:"versionNumber"`
	Description string  `xml:"versionDescription,omitempty"`
	Created     string  `xml:"createTime"`
	CreatedBy   string  `xml:"createdBy"`
	Default     bool    `xml:"defaultVersion"`
	Data        dataXML `xml:"launchTemplateData"`
}

type tagSpecXML struct {
	ResourceType string   `xml:"resourceType"`
	Tags         []ec2Tag `xml:"tagSet>item"`
}

type marketXML struct {
	MarketType string `xml:"marketType"`
	MaxPrice   string `xml:"spotOptions>maxPrice,omitempty"`
}

type nameArnXML struct {
	Arn  string `xml:"arn,omitempty"`
	Name string `xml:"name,omitempty"`
}

// dataXML is a ResponseLaunchTemplateData.
type dataXML struct {
	ImageID        string       `xml:"imageId,omitempty"`
	InstanceType   string       `xml:"instanceType,omitempty"`
	KeyName        string       `xml:"keyName,omitempty"`
	UserData       string       `xml:"userData,omitempty"`
	Profile        *nameArnXML  `xml:"iamInstanceProfile,omitempty"`
	SecurityGroups []string     `xml:"securityGroupIdSet>item,omitempty"`
	TagSpecs       []tagSpecXML `xml:"tagSpecificationSet>item,omitempty"`
	Market         *marketXML   `xml:"instanceMarketOptions,omitempty"`
}

func (s *Server) versionXMLOf(c *call, t *launchTemplate, v *templateVersion) versionXML {
	d := v.Data
	data := dataXML{ImageID: d.ImageID, InstanceType: d.InstanceType, KeyName: d.KeyName, UserData: d.UserData,
		SecurityGroups: d.SecurityGroups}
	if strings.HasPrefix(d.Profile, "arn:") {
		data.Profile = &nameArnXML{Arn: d.Profile}
	} else if d.Profile != "" {
		data.Profile = &nameArnXML{Name: d.Profile}
	}
	if len(d.Tags) > 0 {
		spec := tagSpecXML{ResourceType: "instance"}
		for k, val := range d.Tags {
			spec.Tags = append(spec.Tags, ec2Tag{Key: k, Value: val})
		}
		sortTags(spec.Tags)
		data.TagSpecs = []tagSpecXML{spec}
	}
	if d.Spot {
		data.Market = &marketXML{MarketType: "spot", MaxPrice: d.MaxPrice}
	}
	return versionXML{ID: t.ID, Name: t.Name, Number: int64(v.Number), Description: v.Description,
		Created: v.Created.UTC().Format(time.RFC3339), CreatedBy: "arn:aws:iam::" + c.account() + ":user/" + c.sig.cred.User,
		Default: v.Number == t.Default, Data: data}
}
