package aws

// STUB: owned by the EC2 compute helper; replace whole.

// Machines runs instances as machines.
type Machines interface{}
