package v1

import (
	"encoding/json"
	"time"
)

// AgentProtocolVersion is the version of the agent protocol this package
// speaks. Both sides send it; a version the other side does not speak ends
// the registration or session with an error naming both.
const AgentProtocolVersion = 1

// Agent endpoints.
const (
	AgentRegisterPath = "/v1/agent/register"
	AgentSessionPath  = "/v1/agent/session"
)

// Node states beyond the happy path (see also NodeDiscovered ... NodeReady).
const (
	NodePrecheckFailed = "PRECHECK_FAILED"
)

// Precheck results.
const (
	PrecheckPass = "pass"
	PrecheckWarn = "warn"
	PrecheckFail = "fail"
	// PrecheckNotApplicable is a check that makes no sense for the node
	// (a local machine: a process with its own root directory on a host it
	// shares); its message says why.
	PrecheckNotApplicable = "n/a"
)

// AgentCredentials is the per-cluster credentials file an agent joins with.
// The secret is checked against a hash; the passphrase travels in its own
// file.
type AgentCredentials struct {
	Controller   string `json:"controller"`   // registration URL base, e.g. https://kiln.example:7443
	ControllerCA string `json:"controllerCA"` // PEM: the CA that signed the controller's serving cert
	Cluster      string `json:"cluster"`      // the cluster's id, /v1/projects/{p}/clusters/{c}
	ID           string `json:"id"`
	Secret       string `json:"secret"`
	// ExpiresAt is when the credential stops admitting hosts: its issue
	// time plus the cluster's certificateTTLDays.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// JoinBundle is a node's join files as one document: what a cloud
// provider stages for its instances to fetch (the aws provider's S3
// staging location, kiln-agent --join-from) in place of user data that
// carries them.
type JoinBundle struct {
	Credentials AgentCredentials `json:"credentials"`
	Passphrase  string           `json:"passphrase"`
}

// RegisterRequest is the body of POST /v1/agent/register.
type RegisterRequest struct {
	ProtocolVersion int              `json:"protocolVersion"`
	Cluster         string           `json:"cluster"`
	CredentialID    string           `json:"credentialID"`
	Secret          string           `json:"secret"`
	Passphrase      string           `json:"passphrase"`
	NodeName        string           `json:"nodeName,omitempty"` // set by providers that create machines
	Hostname        string           `json:"hostname"`
	CSR             string           `json:"csr"` // PEM certificate request; the key stays on the node
	Facts           *NodeFacts       `json:"facts,omitempty"`
	Prechecks       []PrecheckResult `json:"prechecks,omitempty"`
}

// RegisterResponse is the answer to a registration.
type RegisterResponse struct {
	ProtocolVersion int    `json:"protocolVersion"`
	Node            string `json:"node"`
	Certificate     string `json:"certificate"` // PEM, signed by the cluster CA
	CA              string `json:"ca"`          // PEM of the cluster CA
	Session         string `json:"session"`     // wss:// URL of the session endpoint
}

// Agent message types (AgentMessage.Type).
const (
	AgentHello     = "hello"
	AgentFacts     = "facts"
	AgentPrechecks = "prechecks"
	AgentHeartbeat = "heartbeat"
	AgentProgress  = "progress"
	AgentLog       = "log"
	AgentResult    = "result"
	// AgentRenew asks for the node's next certificate (Renew). The agent
	// sends it after two thirds of its certificate's lifetime.
	AgentRenew = "renew"
	// AgentNotice says the cloud will take the machine away (Notice): a
	// spot interruption notice. The agent sends it again while it stands.
	AgentNotice = "notice"
)

// AgentMessage is one message from an agent to the controller.
type AgentMessage struct {
	Type      string             `json:"type"`
	Seq       int64              `json:"seq"`
	Time      time.Time          `json:"time"`
	Hello     *AgentHelloBody    `json:"hello,omitempty"`
	Facts     *NodeFacts         `json:"facts,omitempty"`
	Prechecks []PrecheckResult   `json:"prechecks,omitempty"`
	Progress  *StepProgress      `json:"progress,omitempty"`
	Log       *LogLine           `json:"log,omitempty"`
	Result    *InstructionResult `json:"result,omitempty"`
	Renew     *RenewBody         `json:"renew,omitempty"`
	Notice    *Interruption      `json:"notice,omitempty"`
}

// AgentHelloBody opens a session.
type AgentHelloBody struct {
	ProtocolVersion int    `json:"protocolVersion"`
	Node            string `json:"node"`
	AgentVersion    string `json:"agentVersion"`
}

// StepProgress reports a step of an instruction.
type StepProgress struct {
	Instruction string `json:"instruction"`
	Step        string `json:"step"`
	State       string `json:"state"` // a Step* state
	Message     string `json:"message,omitempty"`
}

// LogLine is one line of an agent's log, shown by `kiln node logs`.
type LogLine struct {
	Time   time.Time `json:"time"`
	Stream string    `json:"stream"` // agent, or the component: etcd, apiserver, kubelet, ...
	Line   string    `json:"line"`
}

// Controller message types (ControllerMessage.Type).
const (
	ControllerWelcome     = "welcome"
	ControllerInstruction = "instruction"
	ControllerAck         = "ack"
	// ControllerCertificate answers AgentRenew (Certificate).
	ControllerCertificate = "certificate"
	// ControllerHeartbeat answers an AgentHeartbeat once the controller
	// has handled it (Heartbeat): the agent measures the round trip,
	// the controller's work included. Added within protocol version 1:
	// an agent without it ignores it.
	ControllerHeartbeat = "heartbeat"
	// ControllerRenew asks the agent to renew its node certificate now,
	// not when it is due: the cluster's CA is being replaced (kiln
	// cluster rotate-certs --ca). Added within protocol version 1: an
	// agent without it renews when its certificate is due, and the CA
	// rotation waits for it until its step's timeout.
	ControllerRenew = "renew"
)

// ControllerMessage is one message from the controller to an agent.
type ControllerMessage struct {
	Type        string           `json:"type"`
	Seq         int64            `json:"seq"`
	Welcome     *WelcomeBody     `json:"welcome,omitempty"`
	Instruction *Instruction     `json:"instruction,omitempty"`
	Ack         string           `json:"ack,omitempty"` // the instruction whose result was recorded
	Certificate *CertificateBody `json:"certificate,omitempty"`
	Heartbeat   *HeartbeatBody   `json:"heartbeat,omitempty"`
}

// HeartbeatBody answers a heartbeat: its seq and time, as the agent sent
// them, so the agent matches the answer to its heartbeat and measures the
// round trip on its own clock.
type HeartbeatBody struct {
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
}

// WelcomeBody answers a hello.
type WelcomeBody struct {
	ProtocolVersion   int           `json:"protocolVersion"`
	HeartbeatInterval time.Duration `json:"heartbeatInterval"`
}

// RenewBody asks for the node's next certificate. The controller signs
// it for the node the session's certificate names, whatever the request's
// subject says.
type RenewBody struct {
	CSR string `json:"csr"` // PEM certificate request for a new key; the key stays on the node
}

// CertificateBody answers a renewal: the node's next certificate, or why
// the controller issued none (the agent asks again later). The new
// certificate is accepted, and the one before refused, from the first
// session that presents it.
type CertificateBody struct {
	Certificate string `json:"certificate,omitempty"` // PEM, signed by the cluster CA
	CA          string `json:"ca,omitempty"`          // PEM of the cluster CA
	Error       string `json:"error,omitempty"`
}

// Instruction kinds.
const (
	InstructionInstall = "install" // install Kubernetes in the node's role (params: the distribution's)
	InstructionReset   = "reset"   // stop and remove everything Kubernetes on the node
	// InstructionUploadCerts has an installed kubeadm control-plane node
	// upload the cluster's shared certificates again (kubeadm's
	// kubeadm-certs Secret, encrypted with the cluster's certificate key),
	// so that a control-plane node added to a provisioned cluster can join
	// (params: the distribution's plan).
	InstructionUploadCerts = "upload-certs"
	// InstructionEtcdLeave has a control-plane node leave the control
	// plane as it shrinks (params EtcdLeaveParams): its API server and the
	// components that use it stop, its etcd member is removed through the
	// members that stay, then its etcd stops; the kubelet runs on.
	InstructionEtcdLeave = "etcd-leave"
)

// EtcdLeaveParams are an etcd-leave instruction's params.
type EtcdLeaveParams struct {
	// Member is the node's etcd member's name (the node's name).
	Member string `json:"member"`
	// Through are the client URLs of the members that stay
	// (https://address:2379), asked in order until one answers.
	Through []string `json:"through"`
}

// Instruction asks an agent to act. Its ID is unique; an agent runs an id at
// most once to completion and reports its result until acknowledged.
type Instruction struct {
	ID     string          `json:"id"`
	Kind   string          `json:"kind"`
	Params json.RawMessage `json:"params,omitempty"`
}

// InstructionResult is the outcome of an instruction.
type InstructionResult struct {
	Instruction string `json:"instruction"`
	State       string `json:"state"` // StepSucceeded or StepFailed
	Message     string `json:"message,omitempty"`
	Retryable   bool   `json:"retryable,omitempty"`
	// Data is what a succeeded instruction hands back, by its kind (an
	// etcd-snapshot's EtcdSnapshotResult); none for most.
	Data json.RawMessage `json:"data,omitempty"`
}

// Activation is a cluster's activation material as reissued: the
// credentials file an agent joins with and the passphrase. It is shown
// once, in the answer to the reissue; Kiln keeps only what it needs.
type Activation struct {
	Credentials AgentCredentials `json:"credentials"`
	Passphrase  string           `json:"passphrase"`
}
