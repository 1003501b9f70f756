package console

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// installerView is the installer page: per architecture, the download and
// the commands to run on a host.
type installerView struct {
	*clusterView
	Archs   []installerArch
	Command string // what install.sh runs
}

type installerArch struct {
	Arch, File, Download string
	Commands             string
}

func (c *Console) installerPage(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.showInstaller(w, r, s, http.StatusOK, nil)
}

// showInstaller renders the installer page, with apiErr when an action
// failed.
func (c *Console) showInstaller(w http.ResponseWriter, r *http.Request, s *session, status int, apiErr *v1.Error) error {
	v, err := c.loadCluster(r.Context(), r, s, false)
	if err != nil {
		return err
	}
	iv := installerView{clusterView: v}
	if c.install != nil {
		iv.Command = c.install(v.Cluster.Spec.Distribution)
	}
	for _, arch := range c.archs {
		file := fmt.Sprintf("kiln-installer-%s-%s.tar.gz", v.Cluster.Name, arch)
		iv.Archs = append(iv.Archs, installerArch{
			Arch: arch, File: file,
			Download: clusterURL(v.Project, v.Cluster.Name) + "/installer/download?arch=" + arch,
			Commands: fmt.Sprintf("mkdir -p kiln-installer && tar -xzf %s -C kiln-installer\ncd kiln-installer && sudo ./install.sh", file),
		})
	}
	c.render(w, r, status, "installer.html", page{Title: v.Cluster.Name + ": installer", Session: s,
		Project: v.Project, Cluster: v.Cluster.Name, Tab: "installer", Data: iv, Error: apiErr, Notice: noticeOf(w, r)})
	return nil
}

// installerDownload streams the API's installer for ?arch= (admins only; it
// holds the activation secrets, and the API audits the read).
func (c *Console) installerDownload(w http.ResponseWriter, r *http.Request, s *session) error {
	arch := r.URL.Query().Get("arch")
	if !slices.Contains(c.archs, arch) {
		return &client.APIError{StatusCode: http.StatusBadRequest, Err: v1.Error{Code: v1.CodeInvalidParameter, Target: "arch",
			Message: fmt.Sprintf("arch must be one of %v", c.archs)}}
	}
	project, name := r.PathValue("project"), r.PathValue("cluster")
	return c.download(w, r, s.token, "/v1/projects/"+url.PathEscape(project)+"/clusters/"+url.PathEscape(name)+"/installer",
		url.Values{"arch": {arch}})
}

// installerURL is a cluster's installer page.
func installerURL(project, cluster string) string { return clusterURL(project, cluster) + "/installer" }

// reissueActivation gives the cluster a new activation credential and
// passphrase (admins): installers downloaded before stop working. The new
// material is not shown; the next download holds it.
func (c *Console) reissueActivation(w http.ResponseWriter, r *http.Request, s *session) error {
	project, name := r.PathValue("project"), r.PathValue("cluster")
	_, err := c.client(r, s.token).ReissueActivation(r.Context(), project, name)
	return c.activationDone(w, r, s, err, "A new activation credential and passphrase were issued: installers downloaded before no longer work; download it again for each host still to join.")
}

// revokeActivation revokes the cluster's activation credential (admins):
// no host can join with it; nodes that joined keep working.
func (c *Console) revokeActivation(w http.ResponseWriter, r *http.Request, s *session) error {
	project, name := r.PathValue("project"), r.PathValue("cluster")
	err := c.client(r, s.token).RevokeActivation(r.Context(), project, name)
	return c.activationDone(w, r, s, err, "The activation credential is revoked: no host can join until a new one is issued. Nodes that joined keep working.")
}

// activationDone ends an activation action on the installer page.
func (c *Console) activationDone(w http.ResponseWriter, r *http.Request, s *session, err error, notice string) error {
	if ae, ok := apiError(err); ok && ae.StatusCode != http.StatusUnauthorized && ae.StatusCode != http.StatusNotFound {
		refused(w, r, installerURL(r.PathValue("project"), r.PathValue("cluster")), ae.StatusCode, &ae.Err)
		return nil
	}
	if err != nil {
		return err
	}
	redirect(w, r, installerURL(r.PathValue("project"), r.PathValue("cluster")), notice)
	return nil
}
