package daemon

import (
	"github.com/chalupa-run/chalupa/ingest"
)

// loops lists every background loop the daemon runs: the one registry
// (docs/architecture.md, "Adding a background loop").
func (a *App) loops() []Loop {
	return []Loop{
		&ingest.NoncePruner{DB: a.DB, Clock: a.Clock, Log: a.Log},
	}
}
