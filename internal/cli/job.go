package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	v1 "kiln.dev/kiln/api/v1"
)

func (a *app) jobCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:     "job",
		Aliases: []string{"jobs"},
		Short:   "Run jobs on a cluster (resuming it if it is hibernated), list them, read their logs",
		Long: `A job is a Kubernetes Job of one container that Kiln submits to a cluster
and follows. A Hibernated cluster is resumed for it; once the cluster is up
the job is submitted (namespace default, label kiln.dev/job=NAME), and its
pods make the autoscaler grow a pool like any others. When it ends, the end
of its log is kept with it, readable after the cluster hibernates again; its
end also starts the cluster's idle clock (spec.idleStop).`,
		Example: `  kiln job run dev --image kiln.dev/demo:1 --wait -- whoami
  kiln job list dev
  kiln job logs dev job-20261126-101500-3f2a`,
	})
	cmd.AddCommand(a.jobRunCommand(), a.jobListCommand(), a.jobGetCommand(), a.jobLogsCommand())
	return cmd
}

// newJobName is a job name made by the CLI: the time and 4 random hex
// digits, so that two runs a second apart do not collide.
func newJobName(now time.Time) string {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	return "job-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

func (a *app) jobRunCommand() *cobra.Command {
	var (
		j       v1.Job
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run CLUSTER --image IMAGE [flags] [-- ARGS...]",
		Short: "Submit a job to a cluster; it resumes a hibernated cluster first",
		Long: `run submits a job running IMAGE with ARGS (after --) and, with --command,
another entrypoint. It is named --name, or job-TIME-XXXX; submitting the same
name and spec again is the same job (nothing runs twice), another spec
under a used name is refused. Without --wait it prints the job and returns;
with --wait it follows the job until it ends, prints its log, and exits 0
only if it succeeded (or fails after --timeout, naming the job).`,
		Example: `  kiln job run dev --image kiln.dev/demo:1 --wait -- whoami
  kiln job run batch --name nightly --image my/etl:3 --cpu 2 --memory 4Gi --retries 2 -- --date 2026-11-26`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usageErrorf("run needs CLUSTER")
			}
			if cmd.ArgsLenAtDash() > 1 || (cmd.ArgsLenAtDash() < 0 && len(args) > 1) {
				return usageErrorf("the job's arguments go after --: kiln job run CLUSTER --image IMAGE -- ARGS")
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if j.Spec.Image == "" {
				return usageErrorf("run needs --image IMAGE")
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			cluster := args[0]
			j.Spec.Args = args[1:]
			if j.Name == "" {
				j.Name = newJobName(time.Now())
			}
			got, err := c.CreateJob(cmd.Context(), s.Project, cluster, &j)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "Job %q on cluster %q: %s.\n", got.Name, cluster, jobSays(got))
			if !wait {
				return a.emit(got, func(w io.Writer) error { return renderJobs(w, []v1.Job{*got}, time.Now()) })
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			last := got.Status
			for !got.Status.Ended() {
				select {
				case <-ctx.Done():
					return fmt.Errorf("job %q on cluster %q did not end within --timeout %s (it is %s: %s); follow it with 'kiln job get %s %s'",
						got.Name, cluster, timeout, got.Status.Phase, got.Status.Message, cluster, got.Name)
				case <-time.After(2 * time.Second):
				}
				if got, err = c.GetJob(ctx, s.Project, cluster, got.Name); err != nil {
					return err
				}
				if got.Status.Phase != last.Phase || got.Status.Message != last.Message {
					fmt.Fprintf(a.stderr, "Job %q: %s.\n", got.Name, jobSays(got))
					last = got.Status
				}
			}
			logs, err := c.JobLogs(cmd.Context(), s.Project, cluster, got.Name)
			if err != nil {
				fmt.Fprintf(a.stderr, "The job's log could not be read: %v\n", err)
			}
			_, _ = a.stdout.Write(logs)
			if got.Status.Phase != v1.JobSucceeded {
				return fmt.Errorf("job %q on cluster %q %s: %s", got.Name, cluster, got.Status.Phase, got.Status.Message)
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&j.Name, "name", "", "the job's name (a DNS label; default job-TIME-XXXX)")
	fl.StringVar(&j.Spec.Image, "image", "", "the image to run, from the cluster's project in Kiln's registry (kiln image push) or a system image such as kiln.dev/demo:1")
	fl.StringArrayVar(&j.Spec.Command, "command", nil, "the entrypoint instead of the image's (repeatable: one word each)")
	fl.StringVar(&j.Spec.CPU, "cpu", "", "CPU to request, e.g. 500m or 2 (what the autoscaler makes room for)")
	fl.StringVar(&j.Spec.Memory, "memory", "", "memory to request, e.g. 512Mi or 4Gi")
	fl.IntVar(&j.Spec.Retries, "retries", 0, "how many times a failed pod is run again (0-10)")
	waitFlag(cmd, &wait, "follow the job until it ends, then print its log; exit 1 unless it succeeded")
	fl.DurationVar(&timeout, "timeout", 30*time.Minute, "with --wait: how long to wait for the job to end (a resume and an autoscale count)")
	return cmd
}

// jobSays is a job's phase and message, for people.
func jobSays(j *v1.Job) string {
	if j.Status.Message == "" {
		return j.Status.Phase
	}
	return j.Status.Phase + ": " + j.Status.Message
}

func (a *app) jobListCommand() *cobra.Command {
	l := &listing[v1.Job]{what: "jobs", fields: jobListFields}
	cmd := &cobra.Command{
		Use:     "list CLUSTER",
		Aliases: []string{"ls"},
		Short:   "List a cluster's jobs",
		Example: "  kiln job list dev\n  kiln job list dev -o json",
		Args:    exactArgs("CLUSTER"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if _, err := l.apply(nil); err != nil {
				return err
			}
			c, s, err := a.client()
			if err != nil {
				return err
			}
			jobs, err := c.ListJobs(cmd.Context(), s.Project, args[0])
			if err != nil {
				return err
			}
			if jobs, err = l.apply(jobs); err != nil {
				return err
			}
			return a.emit(jobs, func(w io.Writer) error { return renderJobs(w, jobs, time.Now()) })
		}),
	}
	l.add(cmd)
	return cmd
}

// jobListFields are what the list selects and sorts by.
var jobListFields = []field[v1.Job]{
	{name: "name", of: func(j v1.Job) string { return j.Name }},
	{name: "age", of: func(j v1.Job) string { return stamp(j.CreatedAt) }, desc: true, sortOnly: true},
	{name: "phase", of: func(j v1.Job) string { return j.Status.Phase }},
	{name: "image", of: func(j v1.Job) string { return j.Spec.Image }},
}

func (a *app) jobGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "get CLUSTER NAME",
		Short:   "Show one job",
		Example: "  kiln job get dev nightly -o yaml",
		Args:    exactArgs("CLUSTER", "NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			j, err := c.GetJob(cmd.Context(), s.Project, args[0], args[1])
			if err != nil {
				return err
			}
			return a.emit(j, func(w io.Writer) error { return renderJobs(w, []v1.Job{*j}, time.Now()) })
		}),
	}
}

func (a *app) jobLogsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "logs CLUSTER NAME",
		Short: "Print the log of a job's pod",
		Long: `logs prints the log of the job's newest pod: while it runs, as the cluster's
Kubernetes has it (the last MiB); once it ended, the end Kiln kept (64 KiB),
which stays readable after the cluster hibernates.`,
		Example: "  kiln job logs dev nightly",
		Args:    exactArgs("CLUSTER", "NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			c, s, err := a.client()
			if err != nil {
				return err
			}
			b, err := c.JobLogs(cmd.Context(), s.Project, args[0], args[1])
			if err != nil {
				return err
			}
			_, err = a.stdout.Write(b)
			return err
		}),
	}
}

func renderJobs(w io.Writer, jobs []v1.Job, now time.Time) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tPHASE\tIMAGE\tARGS\tRETRIES\tAGE\tMESSAGE")
	for _, j := range jobs {
		args := orDash(strings.Join(j.Spec.Args, " "))
		row(tw, j.Name, j.Status.Phase, j.Spec.Image, args, strconv.Itoa(j.Spec.Retries), age(j.CreatedAt, now), j.Status.Message)
	}
	return tw.Flush()
}
