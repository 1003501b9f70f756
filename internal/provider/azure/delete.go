package azure

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/resources/armresources"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/provider"
)

// DeleteNetwork deletes the cluster's resource group, and so everything in
// it (ARM deletes a group's resources in their dependency order: subnets
// before the network, security groups and the NAT gateway they use, the
// public IP last), and waits until it is gone. A group that is not there
// is done; one that is being deleted already (a worker died waiting) is
// waited for; one of that name that is not the cluster's is left alone.
// The cluster's staging container (its join data) is deleted before.
func (n *Azure) DeleteNetwork(ctx context.Context, pc provider.Cluster) error {
	c, err := n.cluster(pc)
	if err != nil {
		return err
	}
	key := "resourceGroups/" + c.group
	what := fmt.Sprintf("delete the resource group %s of cluster %s", c.group, c.Name)
	if err := resume[armresources.ResourceGroupsClientDeleteResponse](ctx, n, c, key, what); err != nil && !notFound(err) {
		return err
	}
	got, err := c.api.groups.Get(ctx, c.group, nil)
	switch {
	case notFound(err):
		return n.unstage(ctx, c)
	case err != nil:
		return classify(err, c.api.account, "find the resource group %s of cluster %s", c.group, c.Name)
	}
	if err := c.owns(got.Tags, "resource group "+c.group); err != nil {
		n.log.Warn("not deleting a resource group that is not the cluster's", "cluster", c.Project+"/"+c.Name, "group", c.group, "err", err)
		return nil
	}
	// The staging container first: its identity's assignment is found by
	// the identity, which goes with the group.
	if err := n.unstage(ctx, c); err != nil {
		return err
	}
	if got.Properties != nil && deref(got.Properties.ProvisioningState) == "Deleting" {
		return n.gone(ctx, c)
	}
	n.log.Info("deleting resource group", "cluster", c.Project+"/"+c.Name, "group", c.group)
	_, err = await[armresources.ResourceGroupsClientDeleteResponse](ctx, n, c, key, what)(
		c.api.groups.BeginDelete(ctx, c.group, nil))
	if notFound(err) {
		return nil
	}
	return err
}

// gone waits until the cluster's group, being deleted by an earlier
// attempt, is not there, for at most Options.WaitTimeout.
func (n *Azure) gone(ctx context.Context, c *cluster) error {
	deadline := time.Now().Add(n.opts.WaitTimeout)
	for {
		_, err := c.api.groups.Get(ctx, c.group, nil)
		switch {
		case notFound(err):
			return nil
		case err != nil:
			return classify(err, c.api.account, "find the resource group %s of cluster %s", c.group, c.Name)
		case time.Now().After(deadline):
			return failure.Retryable(v1.CodeTimeout, nil, "waited %s for the resource group %s of cluster %s to be deleted; retrying", n.opts.WaitTimeout, c.group, c.Name)
		}
		t := time.NewTimer(n.opts.PollFrequency)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
