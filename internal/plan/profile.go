package plan

// StepApplyProfile applies the packs of the cluster's profile version.
const StepApplyProfile = "apply-profile"
