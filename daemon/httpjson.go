package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/ingest"
)

// maxAdminBody bounds admin request bodies (bytes).
const maxAdminBody = 64 << 10

// writeJSON writes v with status. Encoding errors are impossible for the
// types used here; a failed write means the client went away.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError writes {"error":{"code","message"}}. message must be safe to
// show: no SQL text, key material, tokens, URLs or fleet data.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, adminapi.ErrorBody{Error: adminapi.ErrorDetail{Code: code, Message: message}})
}

// errBodyTooLarge is returned by readBody when the body exceeds its bound.
var errBodyTooLarge = errors.New("request body too large")

// readBody reads at most limit bytes of r's body. Errors: errBodyTooLarge.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, errBodyTooLarge
	}
	return b, nil
}

// decodeStrict decodes exactly one JSON object into v with the ingest
// path's rules (ingest.DecodeBody): unknown, case-variant and repeated keys
// and trailing data are refused. The error message is safe to return.
func decodeStrict(b []byte, v any) error {
	if rf := ingest.DecodeBody(b, v); rf != nil {
		return errors.New(rf.Message)
	}
	return nil
}

// decodeAdmin reads and strictly decodes an admin request body, answering the
// error itself. It returns false when it has answered.
func decodeAdmin(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := readBody(r, maxAdminBody)
	if errors.Is(err, errBodyTooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("body exceeds %d bytes", maxAdminBody))
		return false
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_body", "could not read body")
		return false
	}
	if err := decodeStrict(b, v); err != nil {
		writeError(w, http.StatusBadRequest, "bad_body", err.Error())
		return false
	}
	return true
}
