package local

// The files each role's install must carry, for the external tests.
var (
	WorkerFiles       = workerFiles
	ControlPlaneFiles = controlPlaneFiles
)
