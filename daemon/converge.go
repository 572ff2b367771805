package daemon

import (
	"context"
	"errors"
	"net/http"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/pulumiexec/doctor"
)

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
