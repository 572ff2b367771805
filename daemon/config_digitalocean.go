package daemon

import (
	"context"
	"errors"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/storage"
)

// DigitalOceanConfig is the DigitalOcean API every section's token travels
// to: the reaper's, the cost reconciler's and converge's (docs/operations.md,
// "DigitalOcean API"). Its own section because three sections share it.
type DigitalOceanConfig struct {
	// APIURL is CHALUPA_DO_API_URL, normalised to scheme://host/
	// (digitalocean.CheckBaseURL).
	APIURL string
}

// loadAPIURL reads CHALUPA_DO_API_URL.
func (d *DigitalOceanConfig) loadAPIURL(l *loader, v string) {
	u, err := digitalocean.CheckBaseURL(v)
	if err != nil {
		// Every DigitalOcean token travels to this URL.
		l.bad("%s %v", digitalocean.EnvBaseURL, err)
		return
	}
	d.APIURL = u
}

// errNoCredential: no credential may look a droplet up in its owner's
// account (no read token for the platform's; no active token for a
// customer organization's).
var errNoCredential = errors.New("no provider credential for this droplet's account")

// dropletLookup is ingest.DropletLookup over the provider clients: the
// platform read client (nil without DIGITALOCEAN_READ_TOKEN) for the
// platform's droplets, and a customer organization's own client (its
// active stored token; never the platform's) for a customer's
// (docs/operations.md, "Customer organizations"). A 404 is a droplet that
// is gone.
func dropletLookup(db *storage.DB, platform digitalocean.DropletAPI, customers *reaper.CustomerTokens) ingest.DropletLookup {
	return func(ctx context.Context, owner ingest.DropletOwner, dropletID int64) (bool, error) {
		c := platform
		if owner.Customer() {
			c = nil
			if customers != nil {
				org, err := storage.OrganizationByID(ctx, db.Read, owner.OrgID)
				if err != nil {
					return false, err
				}
				if c, _, err = customers.CustomerClient(ctx, org); err != nil {
					return false, err
				}
			}
		}
		if c == nil {
			return false, errNoCredential
		}
		_, err := c.GetDroplet(ctx, int(dropletID))
		if errors.Is(err, digitalocean.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}
}

// dropletLookupFor is dropletLookup over the read client and the customer
// tokens, nil when neither is there (the `sunk` check then has no
// credential: docs/operations.md, "Lifecycle events and runs").
func dropletLookupFor(db *storage.DB, read *digitalocean.Client, customers *reaper.CustomerTokens) ingest.DropletLookup {
	if read == nil && customers == nil {
		return nil
	}
	var platform digitalocean.DropletAPI
	if read != nil {
		platform = read
	}
	return dropletLookup(db, platform, customers)
}

// newCustomerTokens opens customer organizations' own provider tokens
// against the DigitalOcean API (nil without the token store:
// docs/operations.md, "Customer organizations").
func newCustomerTokens(d serverDeps) *reaper.CustomerTokens {
	if d.ProviderTokens == nil {
		return nil
	}
	return &reaper.CustomerTokens{Source: d.ProviderTokens, BaseURL: d.Config.DigitalOcean.APIURL, Version: buildinfo.Version, Clock: d.Clock, Log: d.Log}
}
