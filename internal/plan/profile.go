package plan

// StepApplyProfile applies the packs of the cluster's profile version.
const StepApplyProfile = "apply-profile"

// StepInstallServiceLoadBalancers installs what gives Services of type
// LoadBalancer addresses on hosts users bring: MetalLB and the pool of
// spec.network.loadBalancerPool.
const StepInstallServiceLoadBalancers = "install-service-load-balancers"

// StepInstallNetworkPolicy installs what enforces NetworkPolicy on a
// cluster whose spec.network.cni is kube-router: kube-router's network
// policy controller on every node. Skipped for every other pod network.
const StepInstallNetworkPolicy = "install-network-policy"

// StepInstallAccess binds the project's roles to Kubernetes roles in the
// cluster (viewer: view, operator: edit, admin: cluster-admin), for the
// credentials people get (POST .../credential).
const StepInstallAccess = "install-access"
