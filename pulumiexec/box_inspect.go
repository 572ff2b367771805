package pulumiexec

import (
	"context"
	"errors"
	"strconv"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/storage"
)

// BoxInspection is a read of a box's two stacks (data, then compute) and
// of what the provider holds under the box's tag (docs/operations.md,
// "Job doctor").
type BoxInspection struct {
	Stacks   []StackInspection
	Provider adminapi.ProviderInventory
	// ProviderErr is why the provider could not be listed (nil when it
	// was): a digitalocean client error, whose text holds no token or URL.
	// Provider then holds the tag and empty lists.
	ProviderErr error
}

// StackInspection is one stack's state and locks.
type StackInspection struct {
	Name, Role   string
	View         StackView
	Locks        []StackLock
	LocksUnknown bool
	// Err is why the stack's locks or state could not be read (nil when
	// they were); View, and Locks when LocksUnknown, then say nothing.
	// Its text may name paths: StackErrorKind classifies it for answers,
	// the text is for the log.
	Err error
}

// Inspect reads both of the box's stacks (an export each, and the
// backend's lock files, never taking a lock) and lists the droplets,
// volumes and firewalls carrying the box's tag with the executor's
// provision token (list calls only). It does not take the executor's
// mutex: a running job must be diagnosable. A failed provider listing is
// reported in BoxInspection.ProviderErr, and a stack whose locks or state
// cannot be read (an unreadable backend directory, a corrupt state file)
// in its StackInspection.Err, with everything else still read, so the
// doctor answers all else it knows (docs/operations.md, "Job doctor").
// Errors: none; every failure is reported in the inspection.
func (x *Executor) Inspect(ctx context.Context, box storage.Box) (BoxInspection, error) {
	spec := BoxSpecOf(box, jobs.Job{})
	var out BoxInspection
	for _, st := range []struct{ name, role string }{{spec.DataStack(), "data"}, {spec.ComputeStack(), "compute"}} {
		si := StackInspection{Name: st.name, Role: st.role}
		locks, err := x.Engine.StackLocks(st.name)
		switch {
		case errors.Is(err, ErrLocksUnreadable):
			si.LocksUnknown = true
		case err != nil:
			si.LocksUnknown, si.Err = true, err
		}
		si.Locks = locks
		if si.View, err = x.Engine.ViewStack(ctx, st.name); err != nil {
			si.View = StackView{}
			if si.Err == nil {
				si.Err = err
			}
		}
		out.Stacks = append(out.Stacks, si)
	}
	tag := BoxTag(box.Name)
	out.Provider, out.ProviderErr = x.inventory(ctx, tag)
	return out, nil
}

// inventory lists what carries tag at the provider. On an error the
// inventory holds the tag and empty lists. Errors: the digitalocean
// client's.
func (x *Executor) inventory(ctx context.Context, tag string) (adminapi.ProviderInventory, error) {
	inv := adminapi.ProviderInventory{Tag: tag, Droplets: []adminapi.ProviderResource{},
		Volumes: []adminapi.ProviderResource{}, Firewalls: []adminapi.ProviderResource{}}
	empty := inv
	droplets, err := x.API.ListDropletsByTag(ctx, tag)
	if err != nil {
		return empty, err
	}
	for _, d := range droplets {
		inv.Droplets = append(inv.Droplets, adminapi.ProviderResource{ID: strconv.Itoa(d.ID), Name: d.Name, Status: d.Status})
	}
	volumes, err := x.API.ListVolumesByTag(ctx, tag)
	if err != nil {
		return empty, err
	}
	for _, v := range volumes {
		inv.Volumes = append(inv.Volumes, adminapi.ProviderResource{ID: v.ID, Name: v.Name})
	}
	firewalls, err := x.API.ListFirewallsByTag(ctx, tag)
	if err != nil {
		return empty, err
	}
	for _, f := range firewalls {
		inv.Firewalls = append(inv.Firewalls, adminapi.ProviderResource{ID: f.ID, Name: f.Name})
	}
	return inv, nil
}
