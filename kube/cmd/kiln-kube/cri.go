//go:build !kube1.35

package main

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
)

// CRI clients of the hollow kubelet, as kubemark's hollow node makes them. Kubernetes 1.36
// gave the constructors a context and a streaming switch; cri_kube135.go has the 1.35 form.

func newRuntimeService(ctx context.Context, endpoint string) (internalapi.RuntimeService, error) {
	return remote.NewRemoteRuntimeService(ctx, endpoint, 15*time.Second, noop.NewTracerProvider(), false)
}

func newImageService(ctx context.Context, endpoint string) (internalapi.ImageManagerService, error) {
	return remote.NewRemoteImageService(ctx, endpoint, 15*time.Second, noop.NewTracerProvider(), false)
}
