package plan

// StepApplyProfile applies the packs of the cluster's profile version.
const StepApplyProfile = "apply-profile"

// StepInstallServiceLoadBalancers installs what gives Services of type
// LoadBalancer addresses on hosts users bring: MetalLB and the pool of
// spec.network.loadBalancerPool.
const StepInstallServiceLoadBalancers = "install-service-load-balancers"
