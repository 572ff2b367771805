package daemontest

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// errorSpy is a testing.TB that records Errorf instead of failing.
type errorSpy struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (s *errorSpy) Errorf(format string, args ...any) {
	s.mu.Lock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *errorSpy) Helper() {}

// TestIngestSecretScanCatchesLeaks proves the harness's secret scan (run at
// the end of every test above) is not vacuous: planted leaks in each form are
// reported.
func TestIngestSecretScanCatchesLeaks(t *testing.T) {
	h := NewIngest(t, IngestOptions{})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	spy := &errorSpy{TB: t}
	h.AssertNoSecretLeak(spy)
	if len(spy.errs) != 0 {
		t.Fatalf("clean run reported leaks: %v", spy.errs)
	}
	addResponse := func(what string, header http.Header, body string) func() {
		return func() {
			h.rec.mu.Lock()
			h.rec.all = append(h.rec.all, recordedResponse{what: what, header: header, body: []byte(body)})
			h.rec.mu.Unlock()
		}
	}
	plants := map[string]func(){
		"key material in the logs (hex)":             func() { fmt.Fprintf(h.Logs, `{"k":"%x"}`, k.Raw) },
		"key material in the logs (std base64)":      func() { fmt.Fprintf(h.Logs, `{"k":%q}`, base64.StdEncoding.EncodeToString(k.Raw)) },
		"admin token in the logs":                    func() { fmt.Fprintf(h.Logs, `{"auth":"Bearer %s"}`, h.AdminToken()) },
		"ready token in a response":                  addResponse("GET /api/ready -> 503", http.Header{}, "bearer "+h.ReadyToken()),
		"admin token in a response":                  addResponse("GET /x -> 500", http.Header{}, "bearer "+h.AdminToken()),
		"master key (raw url base64) in a header":    addResponse("GET /y -> 200", http.Header{"X-Debug": {base64.RawURLEncoding.EncodeToString(h.cfg.MasterKey())}}, ""),
		"master key (as configured) in a response":   addResponse("GET /z -> 200", http.Header{}, h.Env["CHALUPA_INGEST_MASTER_KEY"]),
		"key material in a second issuance response": addResponse("POST /api/admin/ingest-keys -> 201", http.Header{}, k.Material),
		"key material in another response":           addResponse("GET /api/admin/fleet -> 200", http.Header{}, k.Material),
	}
	for name, plant := range plants {
		logLen, respLen := len(h.Logs.Bytes()), len(h.rec.snapshot())
		spy := &errorSpy{TB: t}
		plant()
		h.AssertNoSecretLeak(spy)
		if len(spy.errs) == 0 {
			t.Errorf("planted leak not reported: %s", name)
		}
		h.Logs.Truncate(logLen)
		h.rec.mu.Lock()
		h.rec.all = h.rec.all[:respLen]
		h.rec.mu.Unlock()
	}
	spy = &errorSpy{TB: t}
	h.AssertNoSecretLeak(spy)
	if len(spy.errs) != 0 {
		t.Fatalf("after removing the plants the scan still reports: %v", spy.errs)
	}
	h.opt.NoLeakCheck = false
}
