package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/chalupa-run/chalupa/adminapi"
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

// readAdminBody reads an admin request body of at most maxAdminBody bytes,
// answering the error itself (413 body_too_large, 400 bad_body). It
// returns false when it has answered.
func readAdminBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := readBody(r, maxAdminBody)
	if errors.Is(err, errBodyTooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("body exceeds %d bytes", maxAdminBody))
		return nil, false
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_body", "could not read body")
		return nil, false
	}
	return b, true
}
