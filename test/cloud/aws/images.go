package aws

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sort"
	"strings"
	"time"
)

// image is an AMI: a node image on the Docker engine (kiln/node:VERSION
// is the AMI named kiln-node-VERSION), or one a test added with AddImage.
type image struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Ref     string    `json:"reference"` // the Docker image reference instances run
	Created time.Time `json:"created"`
}

// amiID is an AMI's id, stable for one image: the image's name and Docker
// id (a rebuilt image is a new AMI, as a new build is on AWS).
func amiID(name, dockerID string) string {
	sum := sha256.Sum256([]byte(name + "\x00" + dockerID))
	return "ami-" + hex.EncodeToString(sum[:])[:17]
}

// AddImage adds an AMI named name whose instances run the Docker image
// reference, and returns its id: for tests without Docker (where no node
// image is listed) and for images other than the node images. It is kept
// in the state.
func (s *Server) AddImage(name, reference string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := amiID(name, reference)
	s.st.EC2.Compute.fill()
	s.st.EC2.Compute.Images[id] = &image{ID: id, Name: name, Ref: reference, Created: s.opts.Now()}
	if err := s.save(); err != nil {
		s.log.Error("saving the state failed", "err", err)
	}
	return id
}

// images are the AMIs: the added ones and the engine's node images, by id.
// Callers hold s.mu.
func (s *Server) images() map[string]*image {
	c := s.st.EC2.Compute
	out := make(map[string]*image, len(c.Images)+len(c.dockerImages))
	for id, im := range c.Images {
		out[id] = im
	}
	for _, im := range c.dockerImages {
		out[im.ID] = im
	}
	return out
}

// imageOf returns an AMI. Callers hold s.mu.
func (s *Server) imageOf(id string) (*image, bool) {
	im, ok := s.images()[id]
	return im, ok
}

func (s *Server) describeImages(c *call) (any, error) {
	type item struct {
		ImageID      string `xml:"imageId"`
		Name         string `xml:"name"`
		Location     string `xml:"imageLocation"`
		State        string `xml:"imageState"`
		OwnerID      string `xml:"imageOwnerId"`
		Created      string `xml:"creationDate"`
		Public       bool   `xml:"isPublic"`
		Architecture string `xml:"architecture"`
		Type         string `xml:"imageType"`
		RootType     string `xml:"rootDeviceType"`
		RootName     string `xml:"rootDeviceName"`
		Virtual      string `xml:"virtualizationType"`
		Hypervisor   string `xml:"hypervisor"`
		Platform     string `xml:"platformDetails"`
		EnaSupport   bool   `xml:"enaSupport"`
	}
	var out struct {
		Items []item `xml:"imagesSet>item"`
	}
	all := s.images()
	var ims []*image
	if ids := c.p.List("ImageId"); len(ids) > 0 {
		for _, id := range ids {
			im, ok := all[id]
			if !ok {
				return nil, errorf(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", id)
			}
			ims = append(ims, im)
		}
	} else {
		for _, im := range all {
			ims = append(ims, im)
		}
		sort.Slice(ims, func(a, b int) bool { return ims[a].Name < ims[b].Name })
	}
	if owners := c.p.List("Owner"); len(owners) > 0 && !ownsImages(owners, c.account()) {
		return out, nil
	}
	fs := filters(c.p)
	for _, im := range ims {
		ok, err := s.matches(im.ID, fs, func(name string) ([]string, bool) {
			switch name {
			case "name":
				return []string{im.Name}, true
			case "image-id":
				return []string{im.ID}, true
			case "state":
				return []string{"available"}, true
			case "architecture":
				return []string{"x86_64"}, true
			case "owner-id":
				return []string{c.account()}, true
			case "is-public":
				return []string{"false"}, true
			case "image-type":
				return []string{"machine"}, true
			}
			return nil, false
		})
		if err != nil {
			return nil, err
		}
		if ok {
			out.Items = append(out.Items, item{ImageID: im.ID, Name: im.Name, Location: c.account() + "/" + im.Name,
				State: "available", OwnerID: c.account(), Created: im.Created.UTC().Format("2006-01-02T15:04:05.000Z"),
				Architecture: "x86_64", Type: "machine", RootType: "ebs", RootName: "/dev/xvda", Virtual: "hvm",
				Hypervisor: "xen", Platform: "Linux/UNIX", EnaSupport: true})
		}
	}
	return out, nil
}

// ownsImages reports whether DescribeImages' Owner.N names the account's
// own images ("self" or its id); "amazon" and others own none here.
func ownsImages(owners []string, account string) bool {
	for _, o := range owners {
		if strings.EqualFold(o, "self") || o == account {
			return true
		}
	}
	return false
}
