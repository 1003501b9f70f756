package aws

import (
	"context"
	"net/url"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
)

const trustEC2 = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}`

// TestIAMRoleLifecycle makes what Kiln makes for its nodes (a role with
// policies in an instance profile), checks the conflicts IAM answers, then
// deletes it in order; the profile survives a restart.
func TestIAMRoleLifecycle(t *testing.T) {
	ctx := context.Background()
	a := newTestAWS(t, Options{})
	c := iam.NewFromConfig(a.config(testKey))
	role := must[*iam.CreateRoleOutput](t, "CreateRole")(c.CreateRole(ctx, &iam.CreateRoleInput{RoleName: awssdk.String("c1-node"),
		AssumeRolePolicyDocument: awssdk.String(trustEC2), Tags: []iamtypes.Tag{{Key: awssdk.String("kiln:cluster"), Value: awssdk.String("c1")}}}))
	if *role.Role.Arn != "arn:aws:iam::123456789012:role/c1-node" || len(*role.Role.RoleId) != 21 || (*role.Role.RoleId)[:4] != "AROA" {
		t.Errorf("CreateRole = %s %s", *role.Role.Arn, *role.Role.RoleId)
	}
	_, err := c.CreateRole(ctx, &iam.CreateRoleInput{RoleName: awssdk.String("c1-node"), AssumeRolePolicyDocument: awssdk.String(trustEC2)})
	wantCode(t, "CreateRole again", err, "EntityAlreadyExists")
	_, err = iam.NewFromConfig(a.config(restrictedKey)).CreateRole(ctx, &iam.CreateRoleInput{RoleName: awssdk.String("x"), AssumeRolePolicyDocument: awssdk.String(trustEC2)})
	wantCode(t, "CreateRole with a key denied it", err, "AccessDenied")
	got := must[*iam.GetRoleOutput](t, "GetRole")(c.GetRole(ctx, &iam.GetRoleInput{RoleName: awssdk.String("c1-node")}))
	if doc, _ := url.QueryUnescape(*got.Role.AssumeRolePolicyDocument); doc != trustEC2 {
		t.Errorf("GetRole trust policy = %s", doc)
	}
	_, err = c.GetRole(ctx, &iam.GetRoleInput{RoleName: awssdk.String("nobody")})
	wantCode(t, "GetRole of no role", err, "NoSuchEntity")

	name := awssdk.String("c1-node")
	must[*iam.PutRolePolicyOutput](t, "PutRolePolicy")(c.PutRolePolicy(ctx, &iam.PutRolePolicyInput{RoleName: name, PolicyName: awssdk.String("ecr"), PolicyDocument: awssdk.String(`{"Version":"2012-10-17","Statement":[]}`)}))
	ro := awssdk.String("arn:aws:iam::aws:policy/AmazonEC2ReadOnlyAccess")
	must[*iam.AttachRolePolicyOutput](t, "AttachRolePolicy")(c.AttachRolePolicy(ctx, &iam.AttachRolePolicyInput{RoleName: name, PolicyArn: ro}))
	attached := must[*iam.ListAttachedRolePoliciesOutput](t, "ListAttachedRolePolicies")(c.ListAttachedRolePolicies(ctx, &iam.ListAttachedRolePoliciesInput{RoleName: name}))
	if len(attached.AttachedPolicies) != 1 || *attached.AttachedPolicies[0].PolicyName != "AmazonEC2ReadOnlyAccess" {
		t.Errorf("ListAttachedRolePolicies = %+v", attached.AttachedPolicies)
	}
	prof := must[*iam.CreateInstanceProfileOutput](t, "CreateInstanceProfile")(c.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: name}))
	if *prof.InstanceProfile.Arn != "arn:aws:iam::123456789012:instance-profile/c1-node" {
		t.Errorf("CreateInstanceProfile ARN = %s", *prof.InstanceProfile.Arn)
	}
	must[*iam.AddRoleToInstanceProfileOutput](t, "AddRoleToInstanceProfile")(c.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: name, RoleName: name}))
	_, err = c.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{InstanceProfileName: name, RoleName: name})
	wantCode(t, "AddRoleToInstanceProfile a second role", err, "LimitExceeded")
	if !a.profileExists(*prof.InstanceProfile.Arn) || !a.profileExists("c1-node") || a.profileExists("other") {
		t.Error("profileExists does not find the profile by name and ARN alone")
	}

	b := newTestAWS(t, Options{StatePath: a.State})
	gp := must[*iam.GetInstanceProfileOutput](t, "GetInstanceProfile after a restart")(iam.NewFromConfig(b.config(testKey)).GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: name}))
	if len(gp.InstanceProfile.Roles) != 1 || *gp.InstanceProfile.Roles[0].RoleName != "c1-node" {
		t.Errorf("after a restart the profile's roles = %+v", gp.InstanceProfile.Roles)
	}

	// Deleting in the wrong order is refused, step by step.
	steps := []struct {
		name  string
		wrong func() error
		code  string
		fix   func() error
	}{
		{"the profile with its role", func() error {
			_, err := c.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: name})
			return err
		}, "DeleteConflict", func() error {
			_, err := c.RemoveRoleFromInstanceProfile(ctx, &iam.RemoveRoleFromInstanceProfileInput{InstanceProfileName: name, RoleName: name})
			return err
		}},
		{"the role with an inline policy", c1Delete(c, name), "DeleteConflict", func() error {
			_, err := c.DeleteRolePolicy(ctx, &iam.DeleteRolePolicyInput{RoleName: name, PolicyName: awssdk.String("ecr")})
			return err
		}},
		{"the role with an attached policy", c1Delete(c, name), "DeleteConflict", func() error {
			_, err := c.DetachRolePolicy(ctx, &iam.DetachRolePolicyInput{RoleName: name, PolicyArn: ro})
			return err
		}},
	}
	for _, s := range steps {
		wantCode(t, "deleting "+s.name, s.wrong(), s.code)
		if err := s.fix(); err != nil {
			t.Fatalf("making way to delete %s: %v", s.name, err)
		}
	}
	must[*iam.DeleteInstanceProfileOutput](t, "DeleteInstanceProfile")(c.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: name}))
	if err := c1Delete(c, name)(); err != nil {
		t.Fatalf("DeleteRole: %v", err)
	}
	_, err = c.GetRole(ctx, &iam.GetRoleInput{RoleName: name})
	wantCode(t, "GetRole of the deleted role", err, "NoSuchEntity")
}

func c1Delete(c *iam.Client, name *string) func() error {
	return func() error {
		_, err := c.DeleteRole(context.Background(), &iam.DeleteRoleInput{RoleName: name})
		return err
	}
}
