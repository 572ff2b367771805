package daemon

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/jonboulle/clockwork"
	"github.com/oklog/ulid/v2"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/boxes"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/storage"
)

// boxHandlers declare and read boxes, the converge intent
// (docs/operations.md, "Boxes"). They hold the database and nothing else.
type boxHandlers struct {
	db    *storage.DB
	clock clockwork.Clock
}

func (h *boxHandlers) register(o *operations) {
	handleOp(o, adminapi.OpCreateBox, h.create)
	handleOp(o, adminapi.OpUpdateBox, h.update)
	handleOp(o, adminapi.OpListBoxes, h.list)
	handleOp(o, adminapi.OpGetBox, h.get)
}

// invalidBox is the 422 for a validation error (its message names the
// field and rule only).
func invalidBox(err error) error {
	return fail(http.StatusUnprocessableEntity, "invalid_box", strings.TrimPrefix(err.Error(), boxes.ErrInvalid.Error()+": "))
}

// checkBoxShape is 422 invalid_box for a box body that breaks a rule its
// wire type's schema tags declare (docs/operations.md, "OpenAPI"), the
// message naming the field and its rule.
func checkBoxShape(req any) error {
	if v := apischema.Check(req); v != nil {
		return fail(http.StatusUnprocessableEntity, "invalid_box", v.Message())
	}
	return nil
}

var errBoxNotFound = fail(http.StatusNotFound, "not_found", "no such box")

func (h *boxHandlers) create(ctx context.Context, req adminapi.CreateBoxRequest) (adminapi.Box, error) {
	// Every field's rule as CreateBoxRequest's schema tags declare it,
	// which the OpenAPI document carries too (docs/operations.md,
	// "OpenAPI"); boxes.Validate holds the configuration with defaults to
	// the same rules.
	if err := checkBoxShape(req); err != nil {
		return adminapi.Box{}, err
	}
	cfg := boxes.WithDefaults(fromAPIBoxConfig(req.BoxConfig))
	// A box carries the agent unless asked otherwise (docs/operations.md,
	// "Boxes"): without it the reaper ends a converged droplet at its
	// launch deadline.
	cfg.Agent = req.Agent == nil || *req.Agent
	if err := boxes.Validate(cfg); err != nil {
		return adminapi.Box{}, invalidBox(err)
	}
	var box storage.Box
	err := h.db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		box, err = storage.CreateBox(ctx, tx, ulid.Make().String(), req.Name, req.Environment, req.Managed, cfg, h.clock.Now())
		return err
	})
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return adminapi.Box{}, fail(http.StatusNotFound, "environment_not_found", "no environment with this slug")
	case errors.Is(err, storage.ErrConflict):
		return adminapi.Box{}, fail(http.StatusConflict, "box_exists", "a box with this name already exists")
	case err != nil:
		return adminapi.Box{}, err
	}
	return toAPIBox(box), nil
}

func (h *boxHandlers) update(ctx context.Context, req adminapi.UpdateBoxRequest) (adminapi.Box, error) {
	// The fields present, by UpdateBoxRequest's schema tags, before the
	// box is looked up: a body the document refuses is refused whatever
	// the box; boxes.Validate then holds the merged configuration.
	if err := checkBoxShape(req); err != nil {
		return adminapi.Box{}, err
	}
	var box storage.Box
	err := h.db.Writer.Do(ctx, func(tx storage.Tx) error {
		cur, err := storage.BoxByRef(ctx, tx, req.Box)
		if err != nil {
			return err
		}
		cfg, managed := cur.Config, cur.Managed
		set := func(dst *string, v *string) {
			if v != nil {
				*dst = *v
			}
		}
		set(&cfg.Region, req.Region)
		set(&cfg.Size, req.Size)
		set(&cfg.Image, req.Image)
		set(&cfg.CustomerSource, req.CustomerSource)
		set(&cfg.ControlPlaneSource, req.ControlPlaneSource)
		if req.SSHKeyFingerprints != nil {
			cfg.SSHKeyFingerprints = *req.SSHKeyFingerprints
		}
		if req.Tags != nil {
			cfg.Tags = *req.Tags
		}
		if req.VolumeSizeGiB != nil {
			cfg.VolumeSizeGiB = *req.VolumeSizeGiB
		}
		if req.Managed != nil {
			managed = *req.Managed
		}
		if req.Agent != nil {
			cfg.Agent = *req.Agent
		}
		if req.AgentIdleMinutes != nil {
			cfg.AgentIdleMinutes = *req.AgentIdleMinutes
		}
		if req.AgentSessionMinutes != nil {
			cfg.AgentSessionMinutes = *req.AgentSessionMinutes
		}
		if err := boxes.Validate(cfg); err != nil {
			return invalidBox(err)
		}
		if managed == cur.Managed && sameBoxConfig(cfg, cur.Config) {
			// Nothing changes: no new version, no write (an update is
			// idempotent; docs/operations.md, "Boxes").
			box = cur
			return nil
		}
		box, err = storage.UpdateBox(ctx, tx, cur.ID, managed, cfg, h.clock.Now())
		return err
	})
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.Box{}, errBoxNotFound
	}
	if err != nil {
		return adminapi.Box{}, err
	}
	return toAPIBox(box), nil
}

// sameBoxConfig reports whether a and b declare the same box (their
// versions and times aside; an empty list is the same as none).
func sameBoxConfig(a, b storage.BoxConfig) bool {
	a.Version, a.UpdatedAt = b.Version, b.UpdatedAt
	if !slices.Equal(a.SSHKeyFingerprints, b.SSHKeyFingerprints) || !slices.Equal(a.Tags, b.Tags) {
		return false
	}
	a.SSHKeyFingerprints, a.Tags = b.SSHKeyFingerprints, b.Tags
	return reflect.DeepEqual(a, b)
}

func (h *boxHandlers) list(ctx context.Context, req adminapi.ListBoxesRequest) (adminapi.BoxList, error) {
	list, err := storage.ListBoxes(ctx, h.db.Read, req.Environment)
	if err != nil {
		return adminapi.BoxList{}, err
	}
	out := adminapi.BoxList{Boxes: make([]adminapi.Box, 0, len(list))}
	for _, b := range list {
		out.Boxes = append(out.Boxes, toAPIBox(b))
	}
	return out, nil
}

func (h *boxHandlers) get(ctx context.Context, req adminapi.GetBoxRequest) (adminapi.Box, error) {
	b, err := storage.BoxByRef(ctx, h.db.Read, req.Box)
	if errors.Is(err, storage.ErrNotFound) {
		return adminapi.Box{}, errBoxNotFound
	}
	if err != nil {
		return adminapi.Box{}, err
	}
	return toAPIBox(b), nil
}

func fromAPIBoxConfig(c adminapi.BoxConfig) storage.BoxConfig {
	return storage.BoxConfig{Region: c.Region, Size: c.Size, Image: c.Image, SSHKeyFingerprints: c.SSHKeyFingerprints,
		CustomerSource: c.CustomerSource, ControlPlaneSource: c.ControlPlaneSource, VolumeSizeGiB: c.VolumeSizeGiB, Tags: c.Tags,
		AgentIdleMinutes: c.AgentIdleMinutes, AgentSessionMinutes: c.AgentSessionMinutes}
}

func toAPIBox(b storage.Box) adminapi.Box {
	out := adminapi.Box{ID: b.ID, Name: b.Name, Environment: b.EnvironmentSlug, Managed: b.Managed, Agent: b.Config.Agent,
		BoxConfig: adminapi.BoxConfig{Region: b.Config.Region, Size: b.Config.Size, Image: b.Config.Image,
			SSHKeyFingerprints: b.Config.SSHKeyFingerprints, CustomerSource: b.Config.CustomerSource,
			ControlPlaneSource: b.Config.ControlPlaneSource, VolumeSizeGiB: b.Config.VolumeSizeGiB, Tags: b.Config.Tags,
			AgentIdleMinutes: b.Config.AgentIdleMinutes, AgentSessionMinutes: b.Config.AgentSessionMinutes},
		ConfigVersion: b.Config.Version, ConfigUpdatedAt: b.Config.UpdatedAt,
		Resources: adminapi.BoxResources{DropletID: b.Resources.DropletID, FirewallID: b.Resources.FirewallID,
			VolumeID: b.Resources.VolumeID, RecordedAt: b.Resources.RecordedAt},
		CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt}
	if !b.Launch.LaunchedAt.IsZero() {
		l := b.Launch
		out.LastLaunch = &adminapi.BoxLaunch{DropletID: l.DropletID, IPv4: l.IPv4, IPv6: l.IPv6, HostKey: l.HostKey,
			LaunchedAt: l.LaunchedAt, JobID: l.JobID}
	}
	if u := b.AgentUpgrade; u.State != "" {
		out.AgentUpgrade = &adminapi.BoxAgentUpgradeState{State: u.State, Version: u.Version, Since: u.Since}
	}
	return out
}
