package main

import (
	"io"
	"net/http"
)

// The floor server is what Go's HTTP server alone costs on this machine: the
// same listener settings as the reference, the same requests, and a handler
// that reads the body and answers 202 with a small JSON body, with no
// signature check, no JSON decoding and no database (contrib/load/README.md,
// "The net/http floor"). A figure for chalupa is read against it: CPU per
// request at a steady rate below the floor's, or a p99 below the floor's,
// cannot be reached by any change to chalupa's own code.
//
// It runs as a child process of the load generator (-serve-floor), placed
// like the other servers.
type floorServer struct{}

// floorAnswer is the floor server's 202 body, about the size of chalupa's.
const floorAnswer = `{"status":"accepted","idleDeadlineAt":"2026-01-01T00:00:00Z"}`

// ServeHTTP answers GET /api/health with 200 and every other request with
// 202 once its body is read.
func (floorServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/api/health" {
		io.WriteString(w, `{"status":"ok"}`)
		return
	}
	_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 64<<10))
	w.WriteHeader(http.StatusAccepted)
	io.WriteString(w, floorAnswer)
}
