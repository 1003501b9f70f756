package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"kiln.dev/kiln/api/client"
	v1 "kiln.dev/kiln/api/v1"
)

// emit writes v as JSON or YAML for -o json|yaml, or calls table for -o table.
func (a *app) emit(v any, table func(io.Writer) error) error {
	return writeOutput(a.stdout, a.flags.output, v, table)
}

func writeOutput(w io.Writer, format string, v any, table func(io.Writer) error) error {
	switch format {
	case "json":
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encode json: %w", err)
		}
		_, err = w.Write(append(data, '\n'))
		return err
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
		_, err = w.Write(data)
		return err
	}
	return table(w)
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
}

func row(tw io.Writer, cols ...string) {
	for i, c := range cols {
		if c == "" {
			cols[i] = "-"
		}
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
}

// renderClusters prints the cluster table. HEALTH is status.health's
// state; CONTROL-PLANE and WORKERS are nodes ready / nodes wanted, as the
// API counts them (status.nodes); COST/H is status.cost's estimate an hour.
func renderClusters(w io.Writer, clusters []v1.Cluster, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tPROVIDER\tVERSION\tSTATE\tHEALTH\tCONTROL-PLANE\tWORKERS\tCOST/H\tENDPOINT\tAGE")
	for _, c := range clusters {
		n := c.Status.Nodes
		row(tw, c.Name, c.Spec.Provider, c.Spec.KubernetesVersion, c.Status.ProvisioningState, healthState(c.Status.Health),
			fmt.Sprintf("%d/%d", n.ControlPlaneReady, n.ControlPlaneWanted),
			fmt.Sprintf("%d/%d", n.WorkersReady, n.WorkersWanted),
			costPerHour(c.Status.Cost), c.Status.Endpoint, age(c.Status.CreatedAt, now))
	}
	return tw.Flush()
}

// costPerHour is an estimate's figure an hour ("$0.425"), with "+" when
// it leaves out a part the price table has no price for; "" without one.
func costPerHour(c *v1.ClusterCost) string {
	if c == nil {
		return ""
	}
	s := v1.Dollars(c.PerHour)
	if !c.Complete {
		s += "+"
	}
	return s
}

// renderCostItems prints what an estimate adds up.
func renderCostItems(w io.Writer, c *v1.ClusterCost) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "PART\tINSTANCE-TYPE\tCOUNT\tEACH/H\tCOST/H\tNOTE")
	for _, it := range c.Items {
		kind := it.InstanceType
		if it.Spot {
			kind += " (spot)"
		}
		row(tw, it.Part, kind, strconv.Itoa(it.Count), v1.Dollars(it.UnitPerHour), v1.Dollars(it.PerHour), it.Note)
	}
	return tw.Flush()
}

// costLine says an estimate in a sentence: an hour, a month, on what
// basis and from which prices; "" without one.
func costLine(c *v1.ClusterCost) string {
	if c == nil {
		return ""
	}
	s := fmt.Sprintf("%s an hour, $%.2f a month (estimate", costPerHour(c), c.PerMonth)
	if c.Basis == v1.CostHibernated {
		s += " while hibernated: disks and kept parts only"
	}
	s += fmt.Sprintf("; %s prices", c.Currency)
	if c.Region != "" {
		s += " of " + c.Region
	}
	s += " as of " + c.PricesAsOf + ")"
	if h := c.HibernatedPerHour; h != nil && *h < c.PerHour {
		s += fmt.Sprintf("; hibernating it would save %s an hour", v1.Dollars(c.PerHour-*h))
	}
	if c.Message != "" {
		s += "; " + c.Message
	}
	return s
}

// healthState is h's state, "-" when the server said none.
func healthState(h *v1.Health) string {
	if h == nil {
		return "-"
	}
	return h.State
}

// renderNodes prints the nodes table; PRECHECKS counts each node's results
// as the console does (v1.PrecheckSummary).
func renderNodes(w io.Writer, nodes []v1.Node, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tROLE\tPOOL\tSTATE\tADDRESS\tPRECHECKS\tHEARTBEAT\tAGE\tMESSAGE")
	for _, n := range nodes {
		hb := ""
		if n.LastHeartbeat != nil {
			hb = age(*n.LastHeartbeat, now) + " ago"
		}
		row(tw, n.Name, n.Role, n.Pool, n.State, n.Address, v1.PrecheckSummary(n.Prechecks), hb, age(n.CreatedAt, now), n.Message)
	}
	return tw.Flush()
}

// renderNode prints one node: its row, what its agent reported about the
// host, and each precheck under the same count as the row.
func renderNode(w io.Writer, n *v1.Node, now time.Time) error {
	if err := renderNodes(w, []v1.Node{*n}, now); err != nil {
		return err
	}
	if f := n.Facts; f != nil {
		fmt.Fprintf(w, "\nHost: %s, %s, kernel %s, %s, %d CPU, %d MiB\n", orDash(f.Hostname), orDash(f.OS), orDash(f.Kernel),
			orDash(f.Arch), f.CPUs, f.MemoryMiB)
		for _, i := range f.Interfaces {
			fmt.Fprintf(w, "  interface %s: %s\n", orDash(i.Name), orDash(strings.Join(i.Addresses, ", ")))
		}
	}
	if len(n.Prechecks) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nPrechecks: %s\n", v1.PrecheckSummary(n.Prechecks))
	tw := newTable(w)
	fmt.Fprintln(tw, "CHECK\tRESULT\tMESSAGE")
	for _, r := range n.Prechecks {
		row(tw, r.Name, r.Result, r.Message)
	}
	return tw.Flush()
}

func renderOperations(w io.Writer, ops []v1.Operation, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tKIND\tSTATUS\tPERCENT\tSTARTED\tDURATION\tERROR")
	for _, o := range ops {
		errCode := ""
		if o.Error != nil {
			errCode = o.Error.Code
		}
		row(tw, o.Name, o.Properties.Kind, o.Status, strconv.Itoa(o.PercentComplete)+"%",
			age(o.StartTime, now)+" ago", opDuration(&o, now), errCode)
	}
	return tw.Flush()
}

// renderOperation prints one operation: a summary, its steps and its error.
func renderOperation(w io.Writer, o *v1.Operation, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "ID:\t%s\n", orDash(o.Name))
	fmt.Fprintf(tw, "Kind:\t%s\n", orDash(o.Properties.Kind))
	fmt.Fprintf(tw, "Target:\t%s\n", orDash(o.Properties.Target))
	fmt.Fprintf(tw, "Status:\t%s\n", orDash(o.Status))
	fmt.Fprintf(tw, "Progress:\t%d%%\n", o.PercentComplete)
	fmt.Fprintf(tw, "Started:\t%s\n", timestamp(o.StartTime))
	fmt.Fprintf(tw, "Duration:\t%s\n", opDuration(o, now))
	if p := o.Properties; p.RetryOf != "" {
		fmt.Fprintf(tw, "Retry of:\t%s (the steps it had done are kept, not run again)\n", p.RetryOf)
	}
	if r := o.Properties.Reason; r != "" {
		fmt.Fprintf(tw, "Reason:\t%s\n", r)
	}
	if ns := o.Properties.Nodes; len(ns) > 0 {
		fmt.Fprintf(tw, "Removes:\t%s\n", strings.Join(ns, ", "))
	}
	if o.Properties.Force {
		fmt.Fprintf(tw, "Forced:\tyes: provider errors are ignored\n")
	}
	if r := o.Properties.CancelRequested; r != nil {
		fmt.Fprintf(tw, "Cancel:\trequested by %s at %s\n", r.By, timestamp(r.Time))
	}
	if o.Error != nil {
		fmt.Fprintf(tw, "Error:\t%s: %s\n", o.Error.Code, o.Error.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.Properties.Force && v1.Terminal(o.Status) {
		printLeftovers(w, o.Properties.Leftovers)
	}
	if o.Error != nil {
		if o.Error.Target != "" {
			fmt.Fprintf(w, "  target: %s\n", o.Error.Target)
		}
		printDetails(w, o.Error.Details, "  ")
	}
	fmt.Fprintln(w)
	return renderSteps(w, o.Properties.Steps, now)
}

func renderSteps(w io.Writer, steps []v1.Step, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "STEP\tSTATE\tATTEMPTS\tDURATION\tMESSAGE")
	for _, s := range steps {
		row(tw, s.Name, s.State, strconv.Itoa(s.Attempts), stepDuration(&s, now), s.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range steps {
		for i, a := range s.FailedAttempts {
			fmt.Fprintf(w, "  %s attempt %d failed after %s: %s\n", s.Name, s.Attempts-len(s.FailedAttempts)+i,
				duration(a.EndTime.Sub(a.StartTime)), a.Message)
		}
	}
	return nil
}

func renderEvents(w io.Writer, events []v1.Event, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "AGE\tTYPE\tREASON\tOBJECT\tMESSAGE")
	for _, e := range events {
		obj := ""
		if e.Node != "" {
			obj = "node/" + e.Node
		} else if e.Operation != "" {
			obj = "operation/" + client.OperationID(e.Operation)
		}
		row(tw, age(e.Time, now), e.Type, e.Reason, obj, e.Message)
	}
	return tw.Flush()
}

// describeView is what 'cluster describe' shows; -o json|yaml prints it as is.
type describeView struct {
	Cluster   *v1.Cluster   `json:"cluster"`
	Nodes     []v1.Node     `json:"nodes"`
	Operation *v1.Operation `json:"operation"`
	Events    []v1.Event    `json:"events"`
}

func renderDescribe(w io.Writer, d *describeView, now time.Time) error {
	c := d.Cluster
	s := &c.Spec
	tw := newTable(w)
	fmt.Fprintf(tw, "Name:\t%s\n", c.Name)
	fmt.Fprintf(tw, "State:\t%s\n", orDash(c.Status.ProvisioningState))
	if c.Status.FailedProvisioningState != "" {
		fmt.Fprintf(tw, "Failed state:\t%s\n", c.Status.FailedProvisioningState)
	}
	fmt.Fprintf(tw, "Endpoint:\t%s\n", orDash(c.Status.Endpoint))
	fmt.Fprintf(tw, "Provider:\t%s\n", orDash(s.Provider))
	if s.CloudAccount != "" || s.Region != "" {
		fmt.Fprintf(tw, "Cloud account:\t%s\n", orDash(s.CloudAccount))
		fmt.Fprintf(tw, "Region:\t%s\n", orDash(s.Region))
	}
	if in := c.Status.Installed; in != nil {
		fmt.Fprintf(tw, "Distribution:\t%s (kubelet %s, CNI %s)\n", orDash(in.Distribution), in.Kubelet, in.CNI)
	}
	fmt.Fprintf(tw, "Kubernetes:\t%s\n", orDash(s.KubernetesVersion))
	if s.Profile.Name != "" {
		fmt.Fprintf(tw, "Profile:\t%s v%d\n", s.Profile.Name, s.Profile.Version)
	}
	fmt.Fprintf(tw, "Network:\tpods %s, services %s, CNI %s\n",
		orDash(s.Network.PodCIDR), orDash(s.Network.ServiceCIDR), installedCNI(c))
	n := c.Status.Nodes
	cp := fmt.Sprintf("%d wanted, %d present, %d ready", n.ControlPlaneWanted, n.ControlPlane, n.ControlPlaneReady)
	if s.ControlPlane.Dedicated {
		cp += ", dedicated"
	}
	if s.ControlPlane.InstanceType != "" {
		cp += ", " + s.ControlPlane.InstanceType
	}
	fmt.Fprintf(tw, "Control plane:\t%s\n", cp)
	fmt.Fprintf(tw, "Node approval:\t%s\n", orDash(s.NodeApproval))
	fmt.Fprintf(tw, "Labels:\t%s\n", labels(s.Labels))
	fmt.Fprintf(tw, "Workers:\t%d wanted, %d present, %d ready\n", n.WorkersWanted, n.Workers, n.WorkersReady)
	if h := c.Status.Health; h != nil {
		fmt.Fprintf(tw, "Health:\t%s (%s): %s\n", h.State, h.Reason, h.Message)
	}
	if line := costLine(c.Status.Cost); line != "" {
		fmt.Fprintf(tw, "Cost:\t%s\n", line)
	}
	if cs := c.Status.Certificates; cs != nil {
		renewal := orDash(s.CertificateRenewal)
		if renewal == "-" {
			renewal = v1.CertificateRenewalAuto
		}
		fmt.Fprintf(tw, "Certificates:\tfirst to expire: %s's, %s (renewal %s)\n", cs.Of, timestamp(cs.NotAfter), renewal)
	}
	if r := c.Status.CARotation; r != nil {
		fmt.Fprintf(tw, "CA rotation:\t%s since %s, new CA %q\n", r.Phase, timestamp(r.Since), r.NewCA)
	}
	fmt.Fprintf(tw, "Created:\t%s (%s ago)\n", timestamp(c.Status.CreatedAt), age(c.Status.CreatedAt, now))
	if e := c.Status.LastError; e != nil && e.Code != "" {
		fmt.Fprintf(tw, "Last error:\t%s: %s (step %s, retryable %t)\n", e.Code, e.Message, orDash(e.Step), e.Retryable)
	}
	for _, cond := range c.Status.Conditions {
		fmt.Fprintf(tw, "Condition %s:\t%s (%s, since %s): %s\n", cond.Type, cond.Status, cond.Reason,
			timestamp(cond.LastTransitionTime), cond.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if c.Hollow() {
		fmt.Fprintf(w, "\n%s\n", c.Status.Installed.Message)
	}

	fmt.Fprintln(w, "\nWorker pools:")
	tw = newTable(w)
	fmt.Fprintln(tw, "NAME\tSIZE\tNODES\tREADY\tAUTOSCALE\tINSTANCE-TYPE\tZONES\tLABELS")
	for _, p := range s.WorkerPools {
		pc := n.Pool(p.Name)
		row(tw, p.Name, strconv.Itoa(p.Size), strconv.Itoa(pc.Present), strconv.Itoa(pc.Ready), autoscaleBounds(p.Autoscale),
			p.InstanceType, strings.Join(p.Zones, ","), labels(p.Labels))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if c.Status.Cost != nil {
		fmt.Fprintln(w, "\nCost:")
		if err := renderCostItems(w, c.Status.Cost); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "\nNodes:")
	if err := renderNodes(w, d.Nodes, now); err != nil {
		return err
	}
	if d.Operation != nil {
		fmt.Fprintln(w, "\nOperation:")
		if err := renderOperation(w, d.Operation, now); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nEvents:")
	return renderEvents(w, d.Events, now)
}

// installedCNI is the pod network installed on the cluster's nodes, and
// the spec's when that is not what is installed.
func installedCNI(c *v1.Cluster) string {
	want := c.Spec.Network.CNI
	in := c.Status.Installed
	if in == nil || in.CNI == want {
		return orDash(want)
	}
	if want == "" {
		return in.CNI
	}
	if in.Distribution == "" {
		return fmt.Sprintf("%s (spec.network.cni %s is not installed: the %s provider installs no distribution)", in.CNI, want, orDash(c.Spec.Provider))
	}
	return fmt.Sprintf("%s (spec.network.cni %s is not installed by the %s distribution)", in.CNI, want, in.Distribution)
}

func labels(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// age is a short, kubectl-like age: 45s, 12m, 5h, 3d.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := max(now.Sub(t), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// duration formats an elapsed time: 0.4s, 12.3s, 1m5s.
func duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

func opDuration(o *v1.Operation, now time.Time) string {
	if o.StartTime.IsZero() {
		return "-"
	}
	end := now
	if o.EndTime != nil {
		end = *o.EndTime
	}
	return duration(end.Sub(o.StartTime))
}

func stepDuration(s *v1.Step, now time.Time) string {
	if s.StartTime == nil {
		return "-"
	}
	end := now
	if s.EndTime != nil {
		end = *s.EndTime
	}
	return duration(end.Sub(*s.FirstStart()))
}

func renderProjects(w io.Writer, projects []v1.Project, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tDISPLAY-NAME\tAGE")
	for _, p := range projects {
		row(tw, p.Name, p.DisplayName, age(p.CreatedAt, now))
	}
	return tw.Flush()
}

// renderWhoami prints the principal, whether it is an owner, its token and
// its projects with roles, "team-a (admin), team-b (viewer)".
func renderWhoami(w io.Writer, who *v1.Whoami) error {
	projects := "none"
	switch {
	case who.Owner:
		projects = "every project, as owner"
	case len(who.Projects) > 0:
		names := make([]string, 0, len(who.Projects))
		for p := range who.Projects {
			names = append(names, p)
		}
		sort.Strings(names)
		for i, p := range names {
			names[i] = p + " (" + who.Projects[p] + ")"
		}
		projects = strings.Join(names, ", ")
	}
	tw := newTable(w)
	fmt.Fprintf(tw, "Principal:\t%s\n", orDash(who.Principal))
	fmt.Fprintf(tw, "Owner:\t%s\n", yesNo(who.Owner))
	fmt.Fprintf(tw, "Projects:\t%s\n", projects)
	if len(who.Groups) > 0 {
		fmt.Fprintf(tw, "Groups:\t%s\n", strings.Join(who.Groups, ", "))
	}
	fmt.Fprintf(tw, "Token:\t%s\n", orDash(who.TokenID))
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func renderUsers(w io.Writer, users []v1.User, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tDISPLAY-NAME\tOWNER\tAGE\tSTATE\tSOURCE")
	for _, u := range users {
		state := "active"
		if u.Disabled {
			state = "disabled"
		}
		row(tw, u.Name, u.DisplayName, yesNo(u.Owner), age(u.CreatedAt, now), state, orDash(u.Source))
	}
	return tw.Flush()
}

func renderGroupBindings(w io.Writer, bs []v1.GroupBinding, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "GROUP\tROLE\tAGE")
	for _, b := range bs {
		row(tw, b.Name, b.Role, age(b.CreatedAt, now))
	}
	return tw.Flush()
}

func renderMembers(w io.Writer, members []v1.Member, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "USER\tROLE\tAGE")
	for _, m := range members {
		row(tw, m.Name, m.Role, age(m.CreatedAt, now))
	}
	return tw.Flush()
}

func renderServiceAccounts(w io.Writer, sas []v1.ServiceAccount, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tROLE\tDESCRIPTION\tAGE")
	for _, sa := range sas {
		row(tw, sa.Name, sa.Role, sa.Description, age(sa.CreatedAt, now))
	}
	return tw.Flush()
}

// renderTokens prints tokens, never a value. STATE is active, revoked or
// expired.
func renderTokens(w io.Writer, tokens []v1.Token, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tPRINCIPAL\tSTATE\tDESCRIPTION\tCREATED\tEXPIRES\tLAST-USED")
	for _, t := range tokens {
		lastUsed := ""
		if t.LastUsedAt != nil {
			lastUsed = age(*t.LastUsedAt, now) + " ago"
		}
		row(tw, t.ID, t.Principal, tokenState(&t, now), t.Description,
			timestamp(t.CreatedAt), timestamp(t.ExpiresAt), lastUsed)
	}
	return tw.Flush()
}

func tokenState(t *v1.Token, now time.Time) string {
	switch {
	case t.RevokedAt != nil:
		return "revoked"
	case !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt):
		return "expired"
	}
	return "active"
}

// renderAudit prints audit entries with their time in UTC, as recorded.
func renderAudit(w io.Writer, entries []v1.AuditEntry) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "TIME\tACTOR\tACTION\tPATH\tSTATUS\tRESULT\tSOURCE")
	for _, e := range entries {
		row(tw, timestamp(e.Time), e.Actor, e.Action, e.Path, strconv.Itoa(e.Status), e.Result, e.Source)
	}
	return tw.Flush()
}

// renderCloudAccounts prints cloud accounts with their quotas, never
// credentials (the API does not send them).
func renderCloudAccounts(w io.Writer, accounts []v1.CloudAccount, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tPROVIDER\tQUOTAS\tAGE")
	for _, a := range accounts {
		row(tw, a.Name, a.Provider, quotaSummary(a.Quotas), age(a.CreatedAt, now))
	}
	return tw.Flush()
}

// quotaSummary is an account's quotas on one line, in the account's order:
// "*: 20 machines, 64 vCPUs; sim-west: 100 machines", where "*" is the entry
// for every region without its own. No quotas is "".
func quotaSummary(quotas []v1.Quota) string {
	entries := make([]string, 0, len(quotas))
	for _, q := range quotas {
		region := q.Region
		if region == "" {
			region = "*"
		}
		var limits []string
		for _, l := range []struct {
			n         *int
			one, many string
		}{
			{q.Machines, "machine", "machines"},
			{q.VCPUs, "vCPU", "vCPUs"},
			{q.LoadBalancers, "load balancer", "load balancers"},
		} {
			if l.n == nil {
				continue
			}
			unit := l.many
			if *l.n == 1 {
				unit = l.one
			}
			limits = append(limits, fmt.Sprintf("%d %s", *l.n, unit))
		}
		if len(limits) == 0 {
			limits = []string{"no limit"}
		}
		entries = append(entries, region+": "+strings.Join(limits, ", "))
	}
	return strings.Join(entries, "; ")
}

// autoscaleBounds says "1-4" (and the scale-down delay when set), or "-"
// for a pool of a fixed size.
func autoscaleBounds(a *v1.Autoscale) string {
	if a == nil {
		return "-"
	}
	s := fmt.Sprintf("%d-%d", a.Min, a.Max)
	if a.ScaleDownAfter != "" {
		s += " after " + a.ScaleDownAfter
	}
	return s
}
