package plan

// StepRenewCertificates installs every node again with new certificates.
const StepRenewCertificates = "renew-certificates"

// rotateCertificatesSteps renew the Kubernetes certificates of every node
// (kiln cluster rotate-certs, or the certificate check before they
// expire).
var rotateCertificatesSteps = []string{StepRenewCertificates}
