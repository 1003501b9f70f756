package profile

import (
	"context"
	"fmt"
	"strings"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/plan/step"
	"kiln.dev/kiln/internal/sysimages"
)

// The kube-router pack: kube-router's network policy controller as a
// DaemonSet in kube-system, firewall-only, on Kiln's bridge pod network
// (spec.network.cni kube-router).
const (
	KubeRouterPack      = "kube-router"
	KubeRouterNamespace = "kube-system"
	// KubeRouterHealthPort is where each pod's /healthz answers, on its
	// node's addresses (hostNetwork): upstream's default.
	KubeRouterHealthPort = 20244
)

// KubeRouterVersion is the kube-router the pack runs: its image's tag.
func KubeRouterVersion() string {
	_, tag, _ := strings.Cut(sysimages.KubeRouterImage, ":")
	return tag
}

// InstallNetworkPolicy (install-network-policy) runs kube-router's network
// policy controller on every node of a cluster whose spec.network.cni is
// kube-router, and waits until it runs on every node (the kube-router pack:
// ServiceAccount, ClusterRole and binding, DaemonSet). Each node's
// controller turns the NetworkPolicies into iptables rules and ipsets in
// the node's network namespace, where the bridge network forwards its
// pods' traffic. Skipped for every other pod network.
func (s Steps) InstallNetworkPolicy(ctx context.Context) error {
	cl := s.r.Cluster()
	if cl.Spec.Network.CNI != v1.CNIKubeRouter {
		return step.Skipped("spec.network.cni is %s: no network policy controller to install", cl.Spec.Network.CNI)
	}
	if !s.r.RunsKubernetes() || s.r.Packs() == nil {
		return step.Skipped("the %s provider's clusters run no Kubernetes", cl.Spec.Provider)
	}
	t, _, err := s.packTarget(ctx)
	if err != nil {
		return err
	}
	version := KubeRouterVersion()
	s.r.Progress(ctx, "pack", "applying kube-router "+version+" (network policy)")
	pk := v1.Pack{Name: KubeRouterPack, Version: version, Namespace: KubeRouterNamespace,
		Manifests: KubeRouterManifests(sysimages.KubeRouterImage, cl.Spec.Network.ServiceCIDR)}
	if _, err := s.r.Packs().Apply(ctx, t, pk); err != nil {
		return failure.Retryable(v1.CodePackFailed, err, "install kube-router's network policy controller: %v", err)
	}
	s.r.Note(fmt.Sprintf("kube-router %s enforces NetworkPolicy on every node (firewall-only, on the bridge pod network)", version))
	return nil
}

// KubeRouterManifests are the kube-router pack's objects: what kube-router's
// policy controller reads (pods, namespaces and NetworkPolicies, which it
// watches, and its node), and the DaemonSet, on the node's network
// with NET_ADMIN and NET_RAW (iptables, ipset) and the node's xtables lock
// (kube-proxy takes it too), tolerating every taint: a node's pods are
// policed wherever they run.
func KubeRouterManifests(image, serviceCIDR string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: kube-router
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kiln:kube-router
rules:
- apiGroups: [""]
  resources: [namespaces, pods, nodes]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kiln:kube-router
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: kiln:kube-router
subjects:
- kind: ServiceAccount
  name: kube-router
  namespace: kube-system
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-router
  namespace: kube-system
  labels:
    k8s-app: kube-router
spec:
  selector:
    matchLabels:
      k8s-app: kube-router
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 1
  template:
    metadata:
      labels:
        k8s-app: kube-router
    spec:
      serviceAccountName: kube-router
      hostNetwork: true
      priorityClassName: system-node-critical
      tolerations:
      - operator: Exists
      containers:
      - name: kube-router
        image: %[1]s
        args:
        - --run-firewall=true
        - --run-router=false
        - --run-service-proxy=false
        - --service-cluster-ip-range=%[2]s
        - --hostname-override=$(NODE_NAME)
        - --health-port=%[3]d
        - --metrics-port=0
        env:
        - name: NODE_NAME
          valueFrom:
            fieldRef:
              fieldPath: spec.nodeName
        securityContext:
          capabilities:
            add: [NET_ADMIN, NET_RAW]
        livenessProbe:
          httpGet:
            path: /healthz
            port: %[3]d
          initialDelaySeconds: 10
          periodSeconds: 10
        readinessProbe:
          httpGet:
            path: /healthz
            port: %[3]d
          periodSeconds: 2
        resources:
          requests:
            cpu: 25m
            memory: 32Mi
        volumeMounts:
        - name: xtables-lock
          mountPath: /run/xtables.lock
      volumes:
      - name: xtables-lock
        hostPath:
          path: /run/xtables.lock
          type: FileOrCreate
`, image, serviceCIDR, KubeRouterHealthPort)
}
