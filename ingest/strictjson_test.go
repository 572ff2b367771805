package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// validHeartbeatJSON is a HeartbeatV1 body with every field present.
const validHeartbeatJSON = `{"environmentSlug":"demo-harbor",` +
	`"deployment":{"id":"dep-1","dropletId":4242,"region":"nyc3","size":"s-1vcpu-1gb"},` +
	`"agentVersion":"agent/1","sentAt":"2026-01-01T00:00:00Z",` +
	`"reaper":{"idleChecks":3,"limitMinutes":30,"lastActivityAt":"2025-12-31T23:55:00Z","ciActive":false},` +
	`"sessionExpiresAt":"2026-01-02T00:00:00Z"}`

// hbWith returns validHeartbeatJSON with the first old replaced by new.
func hbWith(t *testing.T, old, new string) []byte {
	t.Helper()
	if !strings.Contains(validHeartbeatJSON, old) {
		t.Fatalf("%q is not in the valid body", old)
	}
	return []byte(strings.Replace(validHeartbeatJSON, old, new, 1))
}

// TestDecodeBodyStrictKeys drives decodeBody (the production path) into a
// HeartbeatV1: keys that encoding/json would match only case-insensitively,
// and keys repeated within one object, are 422 invalid_body naming the key
// (never a value); malformed JSON stays 400; valid bodies still decode.
func TestDecodeBodyStrictKeys(t *testing.T) {
	const (
		accept = iota
		caseVariant
		duplicate
		malformed
		unknown // refused by encoding/json itself, before the strict check
	)
	tests := []struct {
		name string
		body []byte
		want int
		key  string // the key the refusal must name
	}{
		{"valid body accepted", []byte(validHeartbeatJSON), accept, ""},
		{"valid body without optional fields accepted", []byte(`{"environmentSlug":"demo-harbor","deployment":{"id":"dep-1"},` +
			`"agentVersion":"agent/1","sentAt":"2026-01-01T00:00:00Z","reaper":{"limitMinutes":30,"lastActivityAt":"2025-12-31T23:55:00Z"}}`), accept, ""},
		{"null optional time accepted", hbWith(t, `"sessionExpiresAt":"2026-01-02T00:00:00Z"`, `"sessionExpiresAt":null`), accept, ""},
		{"escaped exact key accepted", hbWith(t, `"environmentSlug"`, `"environment\u0053lug"`), accept, ""},
		{"whitespace everywhere accepted", []byte(strings.NewReplacer(`{`, "{ \n", `":`, "\" :\t", `,`, " , ").Replace(validHeartbeatJSON)), accept, ""},

		{"top level all upper case", hbWith(t, `"environmentSlug"`, `"ENVIRONMENTSLUG"`), caseVariant, "ENVIRONMENTSLUG"},
		{"top level all lower case", hbWith(t, `"environmentSlug"`, `"environmentslug"`), caseVariant, "environmentslug"},
		{"top level Go field name", hbWith(t, `"sentAt"`, `"SentAt"`), caseVariant, "SentAt"},
		{"top level object key", hbWith(t, `"deployment"`, `"Deployment"`), caseVariant, "Deployment"},
		{"top level optional time", hbWith(t, `"sessionExpiresAt"`, `"sessionexpiresat"`), caseVariant, "sessionexpiresat"},
		{"deployment.id upper case", hbWith(t, `"id"`, `"ID"`), caseVariant, "ID"},
		{"deployment.dropletId", hbWith(t, `"dropletId"`, `"dropletID"`), caseVariant, "dropletID"},
		{"deployment.size with long s (Unicode fold)", hbWith(t, `"size"`, `"ſize"`), caseVariant, "ſize"},
		{"reaper.limitMinutes", hbWith(t, `"limitMinutes"`, `"LimitMinutes"`), caseVariant, "LimitMinutes"},
		{"reaper.ciActive", hbWith(t, `"ciActive"`, `"ciactive"`), caseVariant, "ciactive"},
		{"reaper.idleChecks with Kelvin sign (Unicode fold)", hbWith(t, `"idleChecks"`, `"idleChec`+"\u212a"+`s"`), caseVariant, "idleChec\u212as"},

		{"top level key twice", hbWith(t, `"agentVersion":"agent/1"`, `"agentVersion":"agent/1","environmentSlug":"other-env"`), duplicate, "environmentSlug"},
		{"top level key twice, once escaped", hbWith(t, `"agentVersion":"agent/1"`, `"agentVersion":"agent/1","environment\u0053lug":"other-env"`), duplicate, "environmentSlug"},
		{"top level object twice", hbWith(t, `"agentVersion":"agent/1"`, `"agentVersion":"agent/1","deployment":{"id":"dep-2"}`), duplicate, "deployment"},
		{"top level optional time twice, first null", hbWith(t, `"sessionExpiresAt":"2026-01-02T00:00:00Z"`, `"sessionExpiresAt":null,"sessionExpiresAt":"2026-01-02T00:00:00Z"`), duplicate, "sessionExpiresAt"},
		{"deployment.id twice", hbWith(t, `"id":"dep-1"`, `"id":"dep-1","id":"dep-2"`), duplicate, "id"},
		{"reaper.limitMinutes twice", hbWith(t, `"limitMinutes":30`, `"limitMinutes":30,"limitMinutes":10080`), duplicate, "limitMinutes"},
		{"case variant and exact key (the variant is named)", hbWith(t, `"agentVersion":"agent/1"`, `"agentVersion":"agent/1","AgentVersion":"agent/2"`), caseVariant, "AgentVersion"},

		{"truncated body with a case variant", hbWith(t, `"environmentSlug"`, `"ENVIRONMENTSLUG"`)[:40], malformed, ""},
		{"unterminated body with a duplicate", hbWith(t, `"id":"dep-1"`, `"id":"dep-1","id":"dep-2"`)[:len(validHeartbeatJSON)], malformed, ""},
		{"top level key nested", hbWith(t, `"id":"dep-1"`, `"id":"dep-1","environmentSlug":"x"`), unknown, "environmentSlug"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hb HeartbeatV1
			rf := DecodeBody(tc.body, &hb)
			switch tc.want {
			case accept:
				if rf != nil {
					t.Fatalf("refused %d %s: %s", rf.Status, rf.Code, rf.Message)
				}
				if hb.EnvironmentSlug != "demo-harbor" || hb.Deployment.ID != "dep-1" || hb.Reaper.LimitMinutes != 30 {
					t.Fatalf("decoded %+v", hb)
				}
				return
			case malformed:
				if rf == nil || rf.Status != http.StatusBadRequest || rf.Code != "malformed_json" {
					t.Fatalf("got %+v, want 400 malformed_json", rf)
				}
				return
			}
			if rf == nil || rf.Status != http.StatusUnprocessableEntity || rf.Code != "invalid_body" {
				t.Fatalf("got %+v, want 422 invalid_body", rf)
			}
			if !strings.Contains(rf.Message, `"`+tc.key+`"`) {
				t.Errorf("message %q does not name %q", rf.Message, tc.key)
			}
			for _, value := range []string{"demo-harbor", "other-env", "dep-1", "dep-2", "agent/", "10080", "2026"} {
				if strings.Contains(rf.Message, value) {
					t.Errorf("message %q echoes the value %q", rf.Message, value)
				}
			}
			if tc.want == duplicate && !strings.Contains(rf.Message, "more than once") {
				t.Errorf("message %q does not say the key repeats", rf.Message)
			}
			if tc.want == caseVariant && !strings.Contains(rf.Message, "case-sensitive") {
				t.Errorf("message %q does not say names are case-sensitive", rf.Message)
			}
		})
	}
}

// Types exercising the shapes checkStrictKeys knows beyond HeartbeatV1.
type (
	strictItem struct {
		Name string `json:"name"`
		N    int    `json:"n,omitempty"`
	}
	strictEmbedded struct {
		Inner string `json:"inner"`
		Outer string // hidden by strictOuter.Outer
	}
	strictNode struct {
		Label string       `json:"label"`
		Kids  []strictNode `json:"kids"`
	}
	strictOuter struct {
		strictEmbedded
		Outer    string `json:"outer"`
		Untagged int    // JSON name "Untagged"
		Skipped  int    `json:"-"`
		//lint:ignore SA5008 deliberate: `json:"-,"` names the field "-" in encoding/json, a case checkStrictKeys must handle
		Dash     int                   `json:"-,"` // JSON name "-"
		Items    []strictItem          `json:"items"`
		PtrItems []*strictItem         `json:"ptrItems"`
		Pair     [2]strictItem         `json:"pair"`
		Nested   [][]strictItem        `json:"nested"`
		Ptr      *strictItem           `json:"ptr"`
		ByName   map[string]strictItem `json:"byName"`
		Free     map[string]any        `json:"free"`
		Any      any                   `json:"any"`
		Raw      json.RawMessage       `json:"raw"`
		Bytes    []byte                `json:"bytes"`
		When     time.Time             `json:"when"`
		Times    []time.Time           `json:"times"`
		Tree     *strictNode           `json:"tree"`
	}
)

// TestCheckStrictKeysShapes covers the shapes HeartbeatV1 does not have:
// arrays and slices of structs (and of pointers), maps, interfaces, raw and
// unmarshaler leaves, embedded structs, recursive types.
func TestCheckStrictKeysShapes(t *testing.T) {
	const ok = ""
	tests := []struct {
		name string
		body string
		key  string // the refused key, or ok
		dup  bool
	}{
		{"empty object", `{}`, ok, false},
		{"null", `null`, ok, false},
		{"every field", `{"inner":"a","outer":"b","Untagged":1,"-":2,"items":[{"name":"x","n":1},{"name":"y"}],` +
			`"ptrItems":[null,{"name":"x"}],"pair":[{"name":"a"},{"name":"b"}],"nested":[[{"name":"a"}],[]],"ptr":{"name":"p"},` +
			`"byName":{"A":{"name":"a"},"a":{"name":"b"}},"free":{"X":{"Y":[1,{"z":null}]}},"any":[{"k":"v"}],` +
			`"raw":{"RAW":1,"raw":2},"bytes":"AAE=","when":"2026-01-01T00:00:00Z","times":["2026-01-01T00:00:00Z"],` +
			`"tree":{"label":"r","kids":[{"label":"a","kids":[{"label":"b","kids":null}]}]}}`, ok, false},
		{"case variant in a slice element", `{"items":[{"name":"x"},{"Name":"y"}]}`, "Name", false},
		{"duplicate in a slice element", `{"items":[{"name":"x","name":"y"}]}`, "name", true},
		{"same key in two elements is no duplicate", `{"items":[{"name":"x"},{"name":"y"}]}`, ok, false},
		{"case variant through a slice of pointers", `{"ptrItems":[{"NAME":"x"}]}`, "NAME", false},
		{"case variant in an array element", `{"pair":[{"name":"a"},{"N":1}]}`, "N", false},
		{"case variant in a nested slice", `{"nested":[[{"name":"a"}],[{"naMe":"b"}]]}`, "naMe", false},
		{"case variant through a pointer", `{"ptr":{"Name":"p"}}`, "Name", false},
		{"case variant of an embedded field", `{"Inner":"a"}`, "Inner", false},
		{"case variant of an untagged field", `{"untagged":1}`, "untagged", false},
		{"map keys of any case", `{"byName":{"NAME":{"name":"a"}}}`, ok, false},
		{"case variant in a map value", `{"byName":{"a":{"Name":"a"}}}`, "Name", false},
		{"duplicate map key", `{"byName":{"a":{"name":"a"},"a":{"name":"b"}}}`, "a", true},
		{"duplicate map key after many", `{"free":{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k3":0}}`, "k3", true},
		{"duplicate key inside an interface value", `{"any":{"a":{"b":1,"b":2}}}`, "b", true},
		{"duplicate key inside an interface map value", `{"free":{"x":[{"c":1,"c":2}]}}`, "c", true},
		{"case variant in a recursive type", `{"tree":{"label":"r","kids":[{"Label":"a"}]}}`, "Label", false},
		{"duplicate in a recursive type", `{"tree":{"kids":[{"kids":[{"label":"a","label":"b"}]}]}}`, "label", true},
		{"top level duplicate of a leaf", `{"when":"2026-01-01T00:00:00Z","when":"2026-01-01T00:00:00Z"}`, "when", true},
	}
	typ := reflect.TypeFor[*strictOuter]()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The precondition: encoding/json accepts the body.
			var v strictOuter
			dec := json.NewDecoder(strings.NewReader(tc.body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("test body does not decode: %v", err)
			}
			err := checkStrictKeys([]byte(tc.body), typ)
			if tc.key == ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ke *strictKeyError
			if !errors.As(err, &ke) {
				t.Fatalf("got %v, want a strictKeyError for %q", err, tc.key)
			}
			if ke.Key != tc.key || ke.Duplicate != tc.dup {
				t.Fatalf("got key %q duplicate %v, want %q %v", ke.Key, ke.Duplicate, tc.key, tc.dup)
			}
		})
	}
}

// TestStrictKeyErrorTruncates checks that a refusal quotes at most 64 bytes
// of the key, cut on a rune boundary.
func TestStrictKeyErrorTruncates(t *testing.T) {
	long := strings.Repeat("k", 63) + "é" + strings.Repeat("z", 100) // é straddles byte 64
	body := `{"free":{"` + long + `":1,"` + long + `":2}}`
	err := checkStrictKeys([]byte(body), reflect.TypeFor[strictOuter]())
	var ke *strictKeyError
	if !errors.As(err, &ke) || !ke.Duplicate {
		t.Fatalf("got %v, want a duplicate", err)
	}
	want := `field "` + strings.Repeat("k", 63) + `" appears more than once`
	if got := ke.Error(); got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}

// BenchmarkDecodeHeartbeat compares decoding a heartbeat body as before the
// strict key check (encoding/json with DisallowUnknownFields) with decodeBody
// (the same plus checkStrictKeys), and the check alone.
func BenchmarkDecodeHeartbeat(b *testing.B) {
	body := []byte(validHeartbeatJSON)
	b.Run("without-check", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var hb HeartbeatV1
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&hb); err != nil || dec.More() {
				b.Fatal(err)
			}
		}
	})
	b.Run("with-check", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var hb HeartbeatV1
			if rf := DecodeBody(body, &hb); rf != nil {
				b.Fatal(rf.Message)
			}
		}
	})
	b.Run("check-only", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		typ := reflect.TypeFor[*HeartbeatV1]()
		for b.Loop() {
			if err := checkStrictKeys(body, typ); err != nil {
				b.Fatal(err)
			}
		}
	})
}
