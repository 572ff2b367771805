package adminapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestCallWaitsTheOperationsBound: a call of an operation with a Bound
// (adminUpgradeBoxAgent) waits at least that long whatever the HTTP
// client's timeout; the others keep the client's (docs/operations.md,
// "Agent install", under Upgrade).
func TestCallWaitsTheOperationsBound(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(BoxAgentUpgrade{Box: "bx-a"})
	}))
	t.Cleanup(ts.Close)
	// A timeout that has run out before any answer can arrive.
	c := &Client{BaseURL: ts.URL, Token: "t", HTTP: &http.Client{Timeout: time.Nanosecond}}
	if u, err := c.UpgradeBoxAgent(context.Background(), "bx-a"); err != nil || u.Box != "bx-a" {
		t.Fatalf("upgrade with a 1 ns client: %+v, %v; want the answer (the operation's bound applies)", u, err)
	}
	if _, err := c.GetBox(context.Background(), "bx-a"); err == nil {
		t.Fatal("an operation without a Bound ignored the client's timeout")
	}
	if op, _ := Lookup(OpUpgradeBoxAgent); op.Bound != UpgradeBoxAgentCallBound {
		t.Fatalf("adminUpgradeBoxAgent's Bound is %v", op.Bound)
	}
}
