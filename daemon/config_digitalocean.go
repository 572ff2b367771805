package daemon

import "github.com/chalupa-run/chalupa/digitalocean"

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
