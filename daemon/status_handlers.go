package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/alerts/alerter"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
	"github.com/chalupa-run/chalupa/storage"
)

// statusHandlers serve the daemon's own state: they read the database's
// schema version and size and the replicator's health.
type statusHandlers struct {
	db      *storage.DB
	repl    *storage.Replicator
	clock   clockwork.Clock
	started time.Time
	// loops lists the loop switches (loopHandlers.wire).
	loops func() []adminapi.LoopSwitch
	// disk is the free-space guard.
	disk *storage.DiskGuard
	// guard is the reaper's clock guard.
	guard *clockguard.Guard
	// offset reads the fleet's clock offset (ingest.Service.ClockOffset).
	offset func() ingest.OffsetEstimate
	// cfg gives the reaper's and costs' modes.
	cfg *Config
	// tokens checks the DigitalOcean tokens (docs/operations.md, "Alerts").
	tokens *tokenChecks
	// alerter gives the alert sinks' delivery states.
	alerter *alerter.Alerter
}

func (h *statusHandlers) register(o *operations) {
	handleOp(o, adminapi.OpGetStatus, h.getStatus)
	handleOp(o, adminapi.OpCheckTokens, h.checkTokens)
}

func (h *statusHandlers) getStatus(ctx context.Context, _ none) (adminapi.Status, error) {
	v, err := h.db.SchemaVersion(ctx)
	if err != nil {
		return adminapi.Status{}, err
	}
	sinks, err := h.alerter.SinkStates(ctx)
	if err != nil {
		return adminapi.Status{}, err
	}
	now := h.clock.Now()
	return adminapi.Status{
		Version:       buildinfo.Version,
		Origin:        h.cfg.HTTP.Origin,
		StartedAt:     h.started.UTC(),
		UptimeSeconds: now.Sub(h.started).Seconds(),
		SchemaVersion: v,
		DBSizeBytes:   h.db.Size(),
		Replication:   toAPIReplication(h.repl.Health(now)),
		Loops:         h.loops(),
		Storage:       toAPIStorage(h.db.Writer.StorageHealth(), h.disk.Check()),
		ReaperClock:   clockWire(h.guard.Evaluate()),
		ClockOffset:   offsetWire(h.offset()),
		ReaperMode:    h.cfg.Reaper.Mode,
		Costs:         onOff(h.cfg.Costs.On),
		ModeNotes:     append([]string{}, h.cfg.ModeNotes()...),
		Tokens:        h.tokens.last(),
		AlertSinks:    alertSinksWire(sinks),
	}, nil
}

// checkTokens checks every DigitalOcean token now, each with a read-only
// call through the code that holds it; the answer names variables, never
// values (docs/operations.md, "Alerts").
func (h *statusHandlers) checkTokens(ctx context.Context, _ none) (adminapi.TokenChecks, error) {
	return h.tokens.checkNow(ctx), nil
}

// toAPIStorage is the wire form of the writer's storage health and the
// free-space guard's state.
func toAPIStorage(w storage.StorageHealth, d storage.DiskState) adminapi.StorageHealth {
	return adminapi.StorageHealth{
		Failing: w.Failing, FailingSince: w.Since, LastFault: w.LastFault, LastFaultAt: w.LastFaultAt, Faults: w.Faults,
		FreeBytes: d.FreeBytes, TotalBytes: d.TotalBytes, MinFreeBytes: d.MinFreeBytes, DiskLow: d.Low, DiskLowSince: d.LowSince, DiskError: d.Err,
	}
}

// toAPIReplication is the wire form of the replicator's health.
func toAPIReplication(r storage.ReplicationHealth) adminapi.ReplicationHealth {
	return adminapi.ReplicationHealth{
		Kind: r.Kind, Generation: r.Generation, LocalTXID: r.LocalTXID, RemoteTXID: r.RemoteTXID, LastSyncAt: r.LastSyncAt,
		LagSeconds: r.LagSeconds, LastError: r.LastError, LastErrorAt: r.LastErrorAt,
		SyncErrors: r.SyncErrors, FailingSince: r.FailingSince, Failing: r.Failing, LagLimitSeconds: r.LagLimitSeconds,
		Refused: r.Refused, Reseeds: r.Reseeds,
	}
}

// offsetWire is the wire form of the clock offset's estimate.
func offsetWire(e ingest.OffsetEstimate) adminapi.ClockOffset {
	out := adminapi.ClockOffset{Measured: e.Measured, Off: e.Off(), Environments: []adminapi.EnvironmentOffset{}}
	if !e.Measured {
		return out
	}
	out.Seconds, out.Deployments = e.Fleet.Offset.Seconds(), e.Fleet.Deployments
	for _, env := range e.Environments {
		out.Environments = append(out.Environments, adminapi.EnvironmentOffset{Environment: env.Environment, Seconds: env.Offset.Seconds(), Deployments: env.Deployments})
	}
	return out
}

// offsetWarning is what the console shows while the fleet's offset is
// beyond ingest.OffsetAlarm ("" otherwise).
func offsetWarning(e ingest.OffsetEstimate) string {
	if !e.Off() {
		return ""
	}
	return fmt.Sprintf("the server clock is %+.1f s off the fleet's (median of %d deployments' signed heartbeats). Deadlines come from elapsed time, so nothing is held; fix the clock (timedatectl, chrony). See docs/operations.md, \"Heartbeats and deadlines\".",
		e.Fleet.Offset.Seconds(), e.Fleet.Deployments)
}
