package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// MaxProfileVersions bounds the versions one profile keeps.
const MaxProfileVersions = 100

// profiles: PUT writes the version its body names, published unless it
// says draft; a published version does not change (409). GET answers the
// newest version with the list of versions; the routes of registerProfileVersions
// read, publish and delete one version.
func profiles(s *Server) syncResource[*store.Profile, v1.Profile] {
	return syncResource[*store.Profile, v1.Profile]{
		what: "profile", plural: "profiles",
		read: v1.RoleViewer, write: v1.RoleOperator,
		get: s.profiles.GetProfile, list: s.profiles.ListProfiles,
		put: s.profiles.PutProfile, del: s.profiles.DeleteProfile,
		usedBy: func(spec *v1.ClusterSpec) string { return spec.Profile.Name },
		unused: "delete them, or change their spec.profile, first",
		build: func(r *http.Request, project, name string, body []byte, existing *store.Profile, exists bool) (*store.Profile, error) {
			var in v1.Profile
			if err := decodeStrict(body, &in); err != nil {
				return nil, err
			}
			if err := checkName(in.Name, name); err != nil {
				return nil, err
			}
			if failures := validate.Profile(name, &in); len(failures) > 0 {
				return nil, validationError("profile", failures)
			}
			now := s.now().UTC()
			v := v1.Profile{
				Name: name, Version: in.Version, KubernetesVersion: in.KubernetesVersion,
				CNI: in.CNI, Packs: in.Packs, CreatedAt: now,
			}
			if !in.Draft || in.Published {
				v.Published, v.PublishedAt = true, &now
			}
			p := &store.Profile{Project: project}
			p.Name, p.CreatedAt = name, now
			var versions []v1.Profile
			var old *v1.Profile
			if exists {
				p.CreatedAt = existing.CreatedAt
				versions = slices.Clone(existing.Versions)
				old = existing.At(in.Version)
			}
			switch {
			case old != nil && old.Published:
				if !sameProfileVersion(old, &v) {
					return nil, conflict(refOf(r, "profile"), "version",
						"version %d is published and cannot change; put it as version %d", in.Version, nextVersion(existing))
				}
				return existing, nil // the same again (draft or not): nothing to write
			case old != nil:
				v.CreatedAt = old.CreatedAt
				versions[slices.IndexFunc(versions, func(x v1.Profile) bool { return x.Version == in.Version })] = v
			default:
				if len(versions) >= MaxProfileVersions {
					return nil, conflict(refOf(r, "profile"), "version",
						"has %d versions, the most a profile keeps; delete an old version first", len(versions))
				}
				versions = append(versions, v)
			}
			p.SetVersions(versions)
			return p, nil
		},
		out:  profileOut,
		etag: func(p *store.Profile) string { return p.ETag },
	}
}

// profileOut is a profile's wire form: its newest version and the list of
// versions.
func profileOut(p *store.Profile) v1.Profile {
	out := p.Profile
	out.ID = childPath(p.Project, "profiles", p.Name)
	out.Versions = make([]v1.ProfileVersion, len(p.Versions))
	for i, v := range p.Versions {
		out.Versions[i] = v1.ProfileVersion{Version: v.Version, Published: v.Published, PublishedAt: v.PublishedAt, CreatedAt: v.CreatedAt}
	}
	return out
}

// versionOut is one version's wire form.
func versionOut(p *store.Profile, v *v1.Profile) v1.Profile {
	out := *v
	out.Name, out.ETag = p.Name, p.ETag
	out.ID = childPath(p.Project, "profiles", p.Name) + "/versions/" + strconv.Itoa(v.Version)
	out.Versions = nil
	return out
}

// sameProfileVersion: a and b say the same (what a PUT sets).
func sameProfileVersion(a, b *v1.Profile) bool {
	return a.KubernetesVersion == b.KubernetesVersion && a.CNI == b.CNI && reflect.DeepEqual(normalPacks(a.Packs), normalPacks(b.Packs))
}

// normalPacks: nil and empty are the same, and values as JSON decodes them.
func normalPacks(ps []v1.Pack) []v1.Pack {
	if len(ps) == 0 {
		return nil
	}
	return ps
}

func nextVersion(p *store.Profile) int {
	if len(p.Versions) == 0 {
		return 1
	}
	return p.Versions[len(p.Versions)-1].Version + 1
}

// registerProfileVersions adds the routes of one profile version.
func (s *Server) registerProfileVersions() {
	one := "/v1/projects/{project}/profiles/{profile}/versions/{version}"
	s.handle("GET "+one, "profile", inProject(v1.RoleViewer), s.getProfileVersion)
	s.handle("POST "+one+"/publish", "profile", inProject(v1.RoleOperator), s.publishProfileVersion)
	s.handle("DELETE "+one, "profile", inProject(v1.RoleOperator), s.deleteProfileVersion)
}

// profileVersion reads the profile of r's path and the version it names
// (404 naming the versions there are when it has no such version).
func (s *Server) profileVersion(r *http.Request) (*store.Profile, *v1.Profile, error) {
	n, err := strconv.Atoi(r.PathValue("version"))
	if err != nil || n < 1 {
		return nil, nil, badRequest("version", "%q must be a version number, 1 or more", r.PathValue("version"))
	}
	if err := s.requireProject(r); err != nil {
		return nil, nil, err
	}
	p, err := s.profiles.GetProfile(r.Context(), r.PathValue("project"), r.PathValue("profile"))
	if err != nil {
		return nil, nil, err
	}
	v := p.At(n)
	if v == nil {
		have := make([]string, len(p.Versions))
		for i, x := range p.Versions {
			have[i] = strconv.Itoa(x.Version)
		}
		return nil, nil, notFound("version", "%s has no version %d; its versions: %v", refOf(r, "profile"), n, have)
	}
	return p, v, nil
}

func (s *Server) getProfileVersion(w http.ResponseWriter, r *http.Request) error {
	p, v, err := s.profileVersion(r)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", quoteETag(p.ETag))
	writeJSON(w, http.StatusOK, versionOut(p, v))
	return nil
}

// publishProfileVersion makes a version immutable; publishing a published
// version again answers it as it is.
func (s *Server) publishProfileVersion(w http.ResponseWriter, r *http.Request) error {
	for range attempts(r.Context()) {
		p, v, err := s.profileVersion(r)
		if err != nil {
			return err
		}
		if !v.Published {
			now := s.now().UTC()
			v.Published, v.PublishedAt = true, &now
			p.SetVersions(p.Versions)
			err := s.profiles.PutProfile(r.Context(), p, store.Cond{IfMatch: p.ETag})
			if raced(err) {
				continue
			}
			if err != nil {
				return err
			}
			v = p.At(v.Version)
		}
		w.Header().Set("ETag", quoteETag(p.ETag))
		writeJSON(w, http.StatusOK, versionOut(p, v))
		return nil
	}
	return errBusy(refOf(r, "profile"))
}

// deleteProfileVersion deletes one version that no cluster uses; deleting
// the last one deletes the profile.
func (s *Server) deleteProfileVersion(w http.ResponseWriter, r *http.Request) error {
	for range attempts(r.Context()) {
		p, v, err := s.profileVersion(r)
		if err != nil {
			return err
		}
		if users, err := s.profileVersionUsers(r.Context(), p, v.Version); err != nil {
			return err
		} else if len(users) > 0 {
			e := conflict(refOf(r, "profile"), "version", "version %d is used by %d cluster(s): %v; move them to another version (kiln cluster set-profile) or delete them first",
				v.Version, len(users), users)
			for _, c := range users { // each user by its path, for clients to read
				e.body.Details = append(e.body.Details, v1.Error{Code: v1.CodeConflict, Target: clusterPath(p.Project, c),
					Message: fmt.Sprintf("uses version %d", v.Version)})
			}
			return e
		}
		if len(p.Versions) == 1 {
			err = s.profiles.DeleteProfile(r.Context(), p.Project, p.Name, store.Cond{IfMatch: p.ETag})
		} else {
			p.SetVersions(slices.DeleteFunc(slices.Clone(p.Versions), func(x v1.Profile) bool { return x.Version == v.Version }))
			err = s.profiles.PutProfile(r.Context(), p, store.Cond{IfMatch: p.ETag})
		}
		if raced(err) {
			continue
		}
		if err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return errBusy(refOf(r, "profile"))
}

// profileVersionUsers names the clusters of p's project that use version n
// of it: their spec names it (or names the latest published version, which
// n is), or it is the version applied to them.
func (s *Server) profileVersionUsers(ctx context.Context, p *store.Profile, n int) ([]string, error) {
	latest := 0
	if lp := p.LatestPublished(); lp != nil {
		latest = lp.Version
	}
	var users []string
	pg := store.Page{Limit: 500}
	for {
		cls, next, err := s.clusters.ListClusters(ctx, p.Project, pg)
		if err != nil {
			return nil, err
		}
		for _, cl := range cls {
			ref, applied := cl.Spec.Profile, cl.Status.Profile
			switch {
			case ref.Name == p.Name && (ref.Version == n || ref.Version == 0 && n == latest),
				applied != nil && applied.Name == p.Name && applied.Version == n:
				users = append(users, cl.Name)
			}
		}
		if next == "" {
			return users, nil
		}
		pg.Token = next
	}
}

// profileDefaults fills what a cluster spec leaves empty of what its
// profile decides: spec.kubernetesVersion, and spec.network.cni when the
// profile names one, from the version spec.profile names (0: the newest
// published). A profile or version that is not there fills nothing:
// dynamic validation names what is wrong.
func (s *Server) profileDefaults(ctx context.Context, project string, spec *v1.ClusterSpec) error {
	if spec.Profile.Name == "" || spec.KubernetesVersion != "" && spec.Network.CNI != "" {
		return nil
	}
	p, err := s.profiles.GetProfile(ctx, project, spec.Profile.Name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	v := p.LatestPublished()
	if spec.Profile.Version != 0 {
		v = p.At(spec.Profile.Version)
	}
	if v == nil {
		return nil
	}
	if spec.KubernetesVersion == "" {
		spec.KubernetesVersion = v.KubernetesVersion
	}
	if spec.Network.CNI == "" {
		spec.Network.CNI = v.CNI
	}
	return nil
}
