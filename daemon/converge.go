package daemon

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"path/filepath"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/pulumiexec"
	"github.com/chalupa-run/chalupa/pulumiexec/checkpoint"
	"github.com/chalupa-run/chalupa/pulumiexec/doctor"
	"github.com/chalupa-run/chalupa/storage"
)

// newConvergeExecutor builds the converge executor from the configuration
// (docs/operations.md, "Converge"): the engine under CHALUPA_DATA_DIR with
// PULUMI_BACKEND_URL (an s3:// backend gets CHALUPA_SPACES_KEY/SECRET as
// the AWS variables of Pulumi's child processes only), a digitalocean
// client for the provision token, checkpoints in db, and key delivery with
// keys and sealer (chalupa's SSH identity) to CHALUPA_SSH_PORT.
func newConvergeExecutor(cfg *Config, db *storage.DB, keys *ingest.Keyring, sealer *envelope.Sealer, clock clockwork.Clock, log zerolog.Logger) (*pulumiexec.Executor, error) {
	token := cfg.Converge.token().Reveal()
	eng := &pulumiexec.Engine{
		WorkDir: filepath.Join(cfg.DataDir, pulumiexec.WorkDirName), BackendURL: cfg.Converge.PulumiBackendURL,
		PulumiHome: cfg.Converge.PulumiHome, CLIPath: cfg.Converge.PulumiCLI, ProvisionToken: token, APIURL: cfg.DigitalOcean.APIURL,
	}
	if u, err := url.Parse(cfg.Converge.PulumiBackendURL); err == nil && u.Scheme == "s3" {
		eng.ExtraEnv = map[string]string{
			"AWS_ACCESS_KEY_ID":     cfg.Replica.SpacesKey.Reveal(),
			"AWS_SECRET_ACCESS_KEY": cfg.Replica.SpacesSecret.Reveal(),
		}
	}
	api, err := digitalocean.New(digitalocean.Config{BaseURL: cfg.DigitalOcean.APIURL, Token: digitalocean.Token(token), Label: pulumiexec.ProvisionLabel,
		Version: buildinfo.Version, Clock: clock, Logger: log})
	if err != nil {
		return nil, err
	}
	log = log.With().Str("component", "converge").Logger()
	kd := &pulumiexec.KeyDelivery{DB: db, Keys: keys, Sealer: sealer, Clock: clock, Port: cfg.Converge.SSHPort, Log: log}
	return &pulumiexec.Executor{Engine: eng, API: api, Log: log, DeliverKey: kd.Deliver,
		Checkpoints: checkpoint.New(db, clock), AgentRelease: cfg.Converge.AgentRelease, ControlPlaneURL: cfg.HTTP.Origin, DB: db}, nil
}

// doctorHandlers serves adminDiagnoseJob with the job doctor
// (docs/operations.md, "Job doctor").
type doctorHandlers struct{ doc *doctor.Doctor }

func (h *doctorHandlers) register(o *operations) {
	handleOp(o, adminapi.OpDiagnoseJob, h.diagnose)
}

func (h *doctorHandlers) diagnose(ctx context.Context, req adminapi.DiagnoseJobRequest) (adminapi.JobDiagnosis, error) {
	d, err := h.doc.Diagnose(ctx, req.ID)
	switch {
	case errors.Is(err, doctor.ErrNoJob), errors.Is(err, doctor.ErrNoBox):
		return d, fail(http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, doctor.ErrStacksUnreadable):
		return d, fail(http.StatusBadGateway, "doctor_failed", err.Error())
	case err != nil:
		return d, jobError(err)
	}
	return d, nil
}
