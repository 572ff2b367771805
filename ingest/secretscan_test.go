package ingest_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
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

// TestIngestSecretScanCatchesLeaks proves the harness's secret scan
// (daemontest.Ingest's, run at the end of every test on it) is not vacuous:
// planted leaks in each form are reported.
func TestIngestSecretScanCatchesLeaks(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	spy := &errorSpy{TB: t}
	h.AssertNoSecretLeak(spy)
	if len(spy.errs) != 0 {
		t.Fatalf("clean run reported leaks: %v", spy.errs)
	}
	addResponse := func(what string, header http.Header, body string) func() func() {
		return func() func() { return h.PlantResponse(what, header, []byte(body)) }
	}
	addLog := func(format string, a ...any) func() func() {
		return func() func() {
			n := len(h.Logs.Bytes())
			fmt.Fprintf(h.Logs, format, a...)
			return func() { h.Logs.Truncate(n) }
		}
	}
	plants := map[string]func() func(){
		"key material in the logs (hex)":             addLog(`{"k":"%x"}`, k.Raw),
		"key material in the logs (std base64)":      addLog(`{"k":%q}`, base64.StdEncoding.EncodeToString(k.Raw)),
		"admin token in the logs":                    addLog(`{"auth":"Bearer %s"}`, h.AdminToken()),
		"ready token in a response":                  addResponse("GET /api/ready -> 503", http.Header{}, "bearer "+h.ReadyToken()),
		"admin token in a response":                  addResponse("GET /x -> 500", http.Header{}, "bearer "+h.AdminToken()),
		"master key (raw url base64) in a header":    addResponse("GET /y -> 200", http.Header{"X-Debug": {base64.RawURLEncoding.EncodeToString(h.App.Config.MasterKey())}}, ""),
		"master key (as configured) in a response":   addResponse("GET /z -> 200", http.Header{}, h.Env["CHALUPA_INGEST_MASTER_KEY"]),
		"key material in a second issuance response": addResponse("POST /api/admin/ingest-keys -> 201", http.Header{}, k.Material),
		"key material in another response":           addResponse("GET /api/admin/fleet -> 200", http.Header{}, k.Material),
	}
	for name, plant := range plants {
		spy := &errorSpy{TB: t}
		remove := plant()
		h.AssertNoSecretLeak(spy)
		if len(spy.errs) == 0 {
			t.Errorf("planted leak not reported: %s", name)
		}
		remove()
	}
	spy = &errorSpy{TB: t}
	h.AssertNoSecretLeak(spy)
	if len(spy.errs) != 0 {
		t.Fatalf("after removing the plants the scan still reports: %v", spy.errs)
	}
}
