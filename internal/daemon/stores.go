package daemon

import (
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/backend/backupschedule"
	"kiln.dev/kiln/internal/backend/certcheck"
	"kiln.dev/kiln/internal/backend/check"
	"kiln.dev/kiln/internal/backend/elastic"
	"kiln.dev/kiln/internal/backend/health"
	"kiln.dev/kiln/internal/backend/profilecheck"
	"kiln.dev/kiln/internal/backend/retention"
	"kiln.dev/kiln/internal/backend/shard"
	"kiln.dev/kiln/internal/diagnose"
	"kiln.dev/kiln/internal/fleetmetrics"
	"kiln.dev/kiln/internal/gateway"
	"kiln.dev/kiln/internal/plan"
	"kiln.dev/kiln/internal/registry"
	"kiln.dev/kiln/internal/server"
	"kiln.dev/kiln/internal/snapshots"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/store/sqlstore"
	"kiln.dev/kiln/internal/trust"
	"kiln.dev/kiln/internal/validate/dynamic"
	"kiln.dev/kiln/internal/worker"
)

// The store kilnd opens (store.Store, the sum of the store's per-resource
// interfaces) is held here alone: every part is handed it as that part's
// own interfaces, each declared where it is used and sized to the use, or
// as the store's per-resource interfaces it uses. These fail to compile
// when a part asks for what the store does not have.
var (
	_ server.ProjectStore       = store.Store(nil)
	_ server.ClusterStore       = store.Store(nil)
	_ server.OperationStore     = store.Store(nil)
	_ server.NodeStore          = store.Store(nil)
	_ server.CloudAccountStore  = store.Store(nil)
	_ server.ProjectSecretStore = store.Store(nil)
	_ server.ProfileStore       = store.Store(nil)
	_ server.JobStore           = store.Store(nil)
	_ server.EventStore         = store.Store(nil)
	_ server.IdentityStore      = store.Store(nil)
	_ server.AuditStore         = store.Store(nil)
	_ server.DiagnosticsStore   = store.Store(nil)
	_ server.BackupStore        = store.Store(nil)
	_ server.Pinger             = store.Store(nil)
	_ server.Store              = store.Store(nil)
	_ auth.Store                = store.Store(nil)
	_ auth.BootstrapStore       = store.Store(nil)
	_ registry.AuthStore        = store.Store(nil)
	_ registry.Auditor          = store.Store(nil)
	_ healthStore               = store.Store(nil)
	_ fleetmetrics.Store        = store.Store(nil)

	_ worker.Store                = store.Store(nil)
	_ plan.OperationStore         = store.Store(nil)
	_ plan.NodeStore              = store.Store(nil)
	_ plan.InstructionStore       = store.Store(nil)
	_ plan.EventStore             = store.Store(nil)
	_ plan.Store                  = store.Store(nil)
	_ dynamic.Store               = store.Store(nil)
	_ check.Writer                = store.Store(nil)
	_ health.Store                = store.Store(nil)
	_ elastic.Store               = store.Store(nil)
	_ profilecheck.Store          = store.Store(nil)
	_ certcheck.Store             = store.Store(nil)
	_ backupschedule.Store        = store.Store(nil)
	_ diagnose.Store              = store.Store(nil)
	_ retention.Store             = store.Store(nil)
	_ shard.Store                 = store.Store(nil)
	_ snapshots.Store             = store.Store(nil)
	_ snapshots.InstructionReader = store.Store(nil)
	_ trust.SecretStore           = store.Store(nil)

	// The agent gateway's needs go beyond store.Store (it updates cluster
	// secrets without a lease, store.ClusterSecretUpdater): the SQL store
	// has them, and startGateway checks the store it is given.
	_ gateway.Store = (*sqlstore.Store)(nil)
)
