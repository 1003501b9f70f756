//go:build kube1.35

package main

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
)

// The Kubernetes 1.35 form of cri.go: the constructors take a logger and no context (as
// kubemark's hollow node of 1.35 calls them).

func newRuntimeService(_ context.Context, endpoint string) (internalapi.RuntimeService, error) {
	logger := klog.Background()
	return remote.NewRemoteRuntimeService(endpoint, 15*time.Second, noop.NewTracerProvider(), &logger)
}

func newImageService(_ context.Context, endpoint string) (internalapi.ImageManagerService, error) {
	logger := klog.Background()
	return remote.NewRemoteImageService(endpoint, 15*time.Second, noop.NewTracerProvider(), &logger)
}
