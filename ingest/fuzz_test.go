package ingest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
)

// fuzzEpoch is the fixed server clock of FuzzVerify, so that timestamps in
// the committed corpus stay inside (or outside) the skew window forever.
var fuzzEpoch = time.Unix(1767225600, 0).UTC() // 2026-01-01T00:00:00Z

// fuzzSharedKey is CHALUPA_INGEST_KEY for FuzzVerify (fixed, so that a
// corpus entry signed on the shared path reproduces).
const fuzzSharedKey = "fuzz-shared-ingest-key-0123456789abcdef"

// Key selectors of FuzzVerify's first argument (mod fuzzKeys).
const (
	fuzzKeyActive   = iota // active key of demo-harbor
	fuzzKeyRotating        // rotating key of demo-harbor
	fuzzKeyRevoked         // revoked key of demo-harbor
	fuzzKeyOther           // active key of other-env
	fuzzKeyShared          // no key id: the deprecated shared key
	fuzzKeyRaw             // the fuzzed key id string, signed with the active key
	fuzzKeys
)

// Signature modes of FuzzVerify (mod 3).
const (
	fuzzSigValid   = iota // the correct signature for the selected key
	fuzzSigRaw            // the fuzzed signature header, verbatim
	fuzzSigFlipped        // the correct signature with one hex digit changed
)

// FuzzVerify drives the real POST /api/ingest/heartbeat handler (router,
// verification, nonce claim, body decoding, environment binding, the write)
// over a real database with fuzzed headers, timestamp, nonce, signature and
// body. Properties:
//   - no panic and no 5xx: the status is one of 202, 400, 401, 403, 409, 413, 422;
//   - every answer is JSON, and every refusal carries a code;
//   - a 202 only for a known, unrevoked key (or the shared key), a signature
//     that verifies independently, a timestamp within 300 s, a valid nonce
//     never accepted before in that key's partition, and a body that decodes
//     strictly into HeartbeatV1 naming the key's environment, whose keys are
//     exactly protocol v1's (case-sensitive), none repeated in an object;
//   - a 202 adds exactly one heartbeat row and claims the nonce; a refusal
//     adds no heartbeat row and claims nothing;
//   - after a 202, GET /api/admin/fleet still answers 200 (an accepted value
//     must stay encodable).
//
// `go test` runs the seeds below and testdata/fuzz/FuzzVerify; `go test
// -run XXX -fuzz FuzzVerify ./ingest` explores.
func FuzzVerify(f *testing.F) {
	h := daemontest.NewIngest(f, daemontest.IngestOptions{SharedKey: fuzzSharedKey, NoLeakCheck: true, Epoch: fuzzEpoch})
	h.CreateEnv("demo-harbor")
	h.CreateEnv("other-env")
	rotating := h.Issue("demo-harbor")
	active, _ := h.Rotate("demo-harbor")
	revoked := h.Issue("demo-harbor")
	h.Revoke(revoked.ID)
	other := h.Issue("other-env")
	known := map[string]daemontest.Key{active.ID: active, rotating.ID: rotating, other.ID: other}
	handler := h.App.Server.Handler()
	conn := h.SQL()
	accepted := map[[2]string]bool{} // (partition, nonce)

	hb := func(env, dep string, extra string) []byte {
		return h.Heartbeat(daemontest.HeartbeatOpts{Env: env, Deployment: dep, LastActivityAt: fuzzEpoch.Add(-5 * time.Minute), SentAt: fuzzEpoch, ExtraJSONAtTheEnd: extra})
	}
	nonce := "seed-nonce-0000000000000000"
	f.Add(uint8(fuzzKeyActive), "", int64(0), "", nonce+"a", uint8(fuzzSigValid), "", hb("demo-harbor", "dep-1", ""))
	f.Add(uint8(fuzzKeyRotating), "", int64(-299), "", nonce+"b", uint8(fuzzSigValid), "", hb("demo-harbor", "dep-1", ""))
	f.Add(uint8(fuzzKeyShared), "", int64(300), "", nonce+"c", uint8(fuzzSigValid), "", hb("other-env", "dep-2", ""))
	f.Add(uint8(fuzzKeyOther), "", int64(0), "", nonce+"d", uint8(fuzzSigValid), "", hb("demo-harbor", "dep-3", ""))
	f.Add(uint8(fuzzKeyActive), "", int64(301), "", nonce+"e", uint8(fuzzSigValid), "", hb("demo-harbor", "dep-1", ""))
	f.Add(uint8(fuzzKeyRevoked), "", int64(0), "", nonce+"f", uint8(fuzzSigValid), "", hb("demo-harbor", "dep-1", ""))
	f.Add(uint8(fuzzKeyActive), "", int64(0), "", nonce+"g", uint8(fuzzSigValid), "", hb("demo-harbor", "dep-1", `"x":1`))
	f.Add(uint8(fuzzKeyActive), "", int64(0), "", nonce+"h", uint8(fuzzSigFlipped), "", hb("demo-harbor", "dep-1", ""))
	f.Add(uint8(fuzzKeyRaw), "env_demo-harbor_0000000000000000", int64(0), "", nonce+"i", uint8(fuzzSigValid), "", []byte(`{}`))
	f.Add(uint8(fuzzKeyActive), "", int64(0), "17672256OO", nonce+"j", uint8(fuzzSigRaw), "v1="+strings.Repeat("0", 64), []byte(`{"environmentSlug":`))

	f.Fuzz(func(t *testing.T, keySel uint8, keyID string, tsDelta int64, tsRaw string, nonce string, sigMode uint8, sig string, body []byte) {
		// What the request carries.
		var idHeader string
		var key []byte
		switch keySel % fuzzKeys {
		case fuzzKeyActive:
			idHeader, key = active.ID, active.Raw
		case fuzzKeyRotating:
			idHeader, key = rotating.ID, rotating.Raw
		case fuzzKeyRevoked:
			idHeader, key = revoked.ID, revoked.Raw
		case fuzzKeyOther:
			idHeader, key = other.ID, other.Raw
		case fuzzKeyShared:
			idHeader, key = "", []byte(fuzzSharedKey)
		case fuzzKeyRaw:
			idHeader, key = keyID, active.Raw
		}
		ts := tsRaw
		if ts == "" {
			ts = strconv.FormatInt(fuzzEpoch.Unix()+tsDelta, 10)
		}
		sigHeader := protocol.Sign(key, ts, nonce, "POST", ingest.HeartbeatRoute, body)
		switch sigMode % 3 {
		case fuzzSigRaw:
			sigHeader = sig
		case fuzzSigFlipped:
			i := 3 + len(sig)%64
			c := byte('0')
			if sigHeader[i] == '0' {
				c = '1'
			}
			sigHeader = sigHeader[:i] + string(c) + sigHeader[i+1:]
		}

		req := httptest.NewRequest("POST", ingest.HeartbeatRoute, bytes.NewReader(body))
		set := func(k, v string) {
			if v != "" {
				req.Header[k] = []string{v}
			}
		}
		set(protocol.HeaderKeyID, idHeader)
		set(protocol.HeaderTimestamp, ts)
		set(protocol.HeaderNonce, nonce)
		set(protocol.HeaderSignature, sigHeader)
		req.Header.Set("Content-Type", "application/json")

		before := daemontest.CountRows(t, conn, `SELECT coalesce(max(id), 0) FROM heartbeats`)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		status, respBody := w.Code, w.Body.Bytes()
		after := daemontest.CountRows(t, conn, `SELECT coalesce(max(id), 0) FROM heartbeats`)

		if testing.Verbose() {
			t.Logf("-> %d %s", status, bytes.TrimSpace(respBody))
		}
		switch status {
		case 202, 400, 401, 403, 409, 413, 422:
		default:
			t.Fatalf("status %d (body %s); daemon log tail:\n%s", status, respBody, tailBytes(h.Logs.Bytes(), 4<<10))
		}
		if !json.Valid(respBody) {
			t.Fatalf("status %d with a body that is not JSON: %q", status, respBody)
		}

		// The server's view of which key (and nonce partition) was used:
		// the header as the handler reads it (Header.Get of the set value).
		serverID := req.Header.Get(protocol.HeaderKeyID)
		partition := serverID
		var serverKey []byte
		var keyEnv string
		if serverID == "" {
			partition, serverKey = "shared", []byte(fuzzSharedKey)
		} else if k, ok := known[serverID]; ok {
			serverKey, keyEnv = k.Raw, k.Env
		}
		claimKey := [2]string{partition, nonce}

		if status != 202 {
			var eb struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(respBody, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
				t.Fatalf("refusal %d without {error:{code,message}}: %s", status, respBody)
			}
			if after != before {
				t.Fatalf("refusal %d (%s) wrote a heartbeat row (max id %d -> %d)", status, eb.Error.Code, before, after)
			}
			if eb.Error.Code == "nonce_replayed" && !accepted[claimKey] {
				t.Fatalf("409 nonce_replayed for a nonce never accepted in partition %q", partition)
			}
			if protocol.ValidNonce(nonce) {
				claimed := daemontest.CountRows(t, conn, `SELECT count(*) FROM nonces WHERE key_id = ? AND nonce = ?`, partition, nonce) == 1
				if claimed != accepted[claimKey] {
					t.Fatalf("refusal %d (%s): nonce claimed = %v, but accepted before = %v", status, eb.Error.Code, claimed, accepted[claimKey])
				}
			}
			return
		}

		// 202: every condition of protocol v1 must hold, checked here
		// independently of the server's code.
		if serverKey == nil {
			t.Fatalf("202 for key id %q, which is unknown or revoked", serverID)
		}
		ok, err := protocol.Verify(serverKey, req.Header.Get(protocol.HeaderSignature), ts, nonce, "POST", ingest.HeartbeatRoute, body)
		if err != nil || !ok {
			t.Fatalf("202 for a signature that does not verify (key %q, ts %q, nonce %q): %v", serverID, ts, nonce, err)
		}
		sec, err := strconv.ParseInt(ts, 10, 64)
		if err != nil || sec-fuzzEpoch.Unix() > 300 || fuzzEpoch.Unix()-sec > 300 {
			t.Fatalf("202 for timestamp %q outside the 300 s window (%v)", ts, err)
		}
		if !protocol.ValidNonce(nonce) {
			t.Fatalf("202 for invalid nonce %q", nonce)
		}
		if accepted[claimKey] {
			t.Fatalf("202 for a replay: nonce %q was already accepted in partition %q", nonce, partition)
		}
		accepted[claimKey] = true
		if len(body) > ingest.MaxHeartbeatBody {
			t.Fatalf("202 for a body of %d bytes", len(body))
		}
		var hbv protocol.HeartbeatV1
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&hbv); err != nil || strings.TrimSpace(string(body[dec.InputOffset():])) != "" {
			t.Fatalf("202 for a body that does not decode strictly (%v): %q", err, body)
		}
		if err := heartbeatKeysExact(body); err != nil {
			t.Fatalf("202 for a body whose keys are not protocol v1's (%v): %q", err, body)
		}
		if keyEnv != "" && hbv.EnvironmentSlug != keyEnv {
			t.Fatalf("202 for environment %q with a key bound to %q", hbv.EnvironmentSlug, keyEnv)
		}
		if keyEnv == "" && hbv.EnvironmentSlug != "demo-harbor" && hbv.EnvironmentSlug != "other-env" {
			t.Fatalf("202 on the shared path for unknown environment %q", hbv.EnvironmentSlug)
		}
		var acc protocol.HeartbeatAccepted
		if err := json.Unmarshal(respBody, &acc); err != nil || !acc.Accepted {
			t.Fatalf("202 body %s", respBody)
		}
		if after != before+1 {
			t.Fatalf("202 wrote %d heartbeat rows, want 1", after-before)
		}
		if daemontest.CountRows(t, conn, `SELECT count(*) FROM nonces WHERE key_id = ? AND nonce = ?`, partition, nonce) != 1 {
			t.Fatalf("202 without the nonce claimed in partition %q", partition)
		}
		// Whatever was accepted, the fleet view still reads.
		fr := httptest.NewRequest("GET", daemontest.OpPath(adminapi.OpListFleet), nil)
		fr.Header.Set("Authorization", "Bearer "+h.AdminToken())
		fw := httptest.NewRecorder()
		handler.ServeHTTP(fw, fr)
		if fw.Code != 200 {
			t.Fatalf("after accepting %q, GET /api/admin/fleet answered %d %s", body, fw.Code, fw.Body.Bytes())
		}
	})
}

// heartbeatKeysV1 is protocol v1's heartbeat schema, written out by hand
// (not derived from HeartbeatV1's tags, so that FuzzVerify's oracle stays
// independent of the server's code): the exact keys of each object, by the
// key holding the object ("" for the body itself).
var heartbeatKeysV1 = map[string][]string{
	"":           {"environmentSlug", "deployment", "agentVersion", "sentAt", "reaper", "sessionExpiresAt"},
	"deployment": {"id", "dropletId", "region", "size"},
	"reaper":     {"idleChecks", "limitMinutes", "lastActivityAt", "ciActive"},
}

// heartbeatKeysExact returns an error naming the first key of body (a JSON
// object known to be well formed) that is not, byte for byte, one of its
// object's keys in heartbeatKeysV1, or that repeats within its object.
// encoding/json alone accepts both (keys match case-insensitively, the last
// of repeated keys wins).
func heartbeatKeysExact(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("not an object (%v)", err)
	}
	return heartbeatObjectKeys(dec, "")
}

// heartbeatObjectKeys checks the members of the object held by key (its '{'
// already read) and reads through its '}'.
func heartbeatObjectKeys(dec *json.Decoder, holder string) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string)
		if !slices.Contains(heartbeatKeysV1[holder], key) {
			return fmt.Errorf("key %q is not a key of %q", key, holder)
		}
		if seen[key] {
			return fmt.Errorf("key %q repeats in %q", key, holder)
		}
		seen[key] = true
		tok, err = dec.Token()
		if err != nil {
			return err
		}
		_, holds := heartbeatKeysV1[key]
		switch {
		case tok == json.Delim('{') && holds && holder == "":
			if err := heartbeatObjectKeys(dec, key); err != nil {
				return err
			}
		case tok == json.Delim('{') || tok == json.Delim('['):
			return fmt.Errorf("key %q holds an object or array", key)
		}
	}
	_, err := dec.Token() // '}'
	return err
}

func tailBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
