package pulumiexec

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// Cancel cancels a held lock on both of the box's stacks (`pulumi
// cancel`, through the Automation API's Stack.Cancel): what a SIGKILLed
// update leaves behind. A stack without a lock is left as it is
// (docs/operations.md, "Converge"). Errors: the CLI's failure.
func (e *Engine) Cancel(ctx context.Context, spec BoxSpec) error {
	for _, name := range []string{spec.ComputeStack(), spec.DataStack()} {
		s, err := e.stack(ctx, name, nil)
		if err != nil {
			return e.cliError(err)
		}
		if err := s.Cancel(ctx); err != nil {
			return e.cliError(err)
		}
	}
	return nil
}

// Wipe removes the box's stacks from the state cache with their local
// backups and history (`pulumi stack rm --force --remove-backups`), and
// their workspace directories. The oracle is not touched: the next up
// adopts what it records (docs/operations.md, "Converge"). Errors: the
// CLI's failure.
func (e *Engine) Wipe(ctx context.Context, spec BoxSpec) error {
	for _, name := range []string{spec.ComputeStack(), spec.DataStack()} {
		if err := e.WipeStack(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// WipeStack removes one stack (a name from BoxSpec.ComputeStack or
// DataStack) as Wipe does. Errors: the CLI's failure.
func (e *Engine) WipeStack(ctx context.Context, name string) error {
	s, err := e.stack(ctx, name, nil)
	if err != nil {
		return e.cliError(err)
	}
	cmd := e.cmd()
	dir := filepath.Join(e.WorkDir, "workspaces", name)
	if _, _, _, err := cmd.Run(ctx, dir, nil, nil, nil, nil, "stack", "rm", "--yes", "--force", "--remove-backups", "--stack", s.Name()); err != nil {
		return e.cliError(fmt.Errorf("converge: remove stack %s: %w", name, err))
	}
	return os.RemoveAll(dir)
}

// StateIDs are the provider ids one stack's state records, by resource.
type StateIDs struct {
	// DropletID, FirewallID and VolumeID are "" when the state has none.
	DropletID, FirewallID, VolumeID string
}

// merge fills the ids s lacks from o.
func (s StateIDs) merge(o StateIDs) StateIDs {
	if s.DropletID == "" {
		s.DropletID = o.DropletID
	}
	if s.FirewallID == "" {
		s.FirewallID = o.FirewallID
	}
	if s.VolumeID == "" {
		s.VolumeID = o.VolumeID
	}
	return s
}

// ClearPending drops the pending operations a killed update left in each
// of the box's stacks (export, remove pending_operations, import) and
// returns the ids each stack's state records (compute, then data). A
// pending create may have reached the provider: the caller compares the
// returned ids with what the provider holds and wipes a stack that
// disagrees, so the next up adopts instead of creating twice
// (docs/operations.md, "Jobs"). Errors: the CLI's failure; a state that is
// not a deployment.
func (e *Engine) ClearPending(ctx context.Context, spec BoxSpec) (compute, data StateIDs, err error) {
	for i, name := range []string{spec.ComputeStack(), spec.DataStack()} {
		s, err := e.stack(ctx, name, nil)
		if err != nil {
			return compute, data, e.cliError(err)
		}
		exp, err := s.Export(ctx)
		if err != nil {
			return compute, data, e.cliError(err)
		}
		ids, changed, dep, err := dropPending(exp.Deployment)
		if err != nil {
			return compute, data, fmt.Errorf("converge: stack %s state: %w", name, err)
		}
		if changed {
			if err := s.Import(ctx, apitype.UntypedDeployment{Version: exp.Version, Deployment: dep}); err != nil {
				return compute, data, e.cliError(err)
			}
		}
		if i == 0 {
			compute = ids
		} else {
			data = ids
		}
	}
	return compute, data, nil
}

// dropPending removes pending_operations from an exported deployment and
// reads its resources' ids. changed is false when there was nothing to
// drop (dep is then nil).
func dropPending(raw json.RawMessage) (ids StateIDs, changed bool, dep json.RawMessage, err error) {
	if len(raw) == 0 {
		return ids, false, nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return ids, false, nil, err
	}
	var res []struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	}
	if r, ok := m["resources"]; ok {
		if err := json.Unmarshal(r, &res); err != nil {
			return ids, false, nil, err
		}
	}
	for _, r := range res {
		switch r.Type {
		case typeDroplet:
			ids.DropletID = r.ID
		case typeFirewall:
			ids.FirewallID = r.ID
		case typeVolume:
			ids.VolumeID = r.ID
		}
	}
	if p, ok := m["pending_operations"]; !ok || string(p) == "null" || string(p) == "[]" {
		return ids, false, nil, nil
	}
	delete(m, "pending_operations")
	dep, err = json.Marshal(m)
	return ids, true, dep, err
}

// cmd is the CLI runner the engine's stacks use.
func (e *Engine) cmd() *command {
	return &command{path: e.CLIPath, nice: e.nice(), env: e.env()}
}

var _ auto.PulumiCommand = (*command)(nil)
