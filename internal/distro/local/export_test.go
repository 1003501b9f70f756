package local

// The files each role's install must carry, for the external tests.
var (
	WorkerFiles       = workerFiles
	ControlPlaneFiles = controlPlaneFiles
)

// ContainerFiles are the files a node that runs containers gets besides.
var ContainerFiles = containerFiles
