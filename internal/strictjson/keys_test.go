package strictjson

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

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

// TestDecodeRefusesNonObjects: a body must be one JSON object; null, arrays,
// strings and numbers are shape errors, malformed or trailing data syntax
// errors.
func TestDecodeRefusesNonObjects(t *testing.T) {
	type body struct {
		Slug string `json:"slug"`
	}
	for _, tc := range []struct {
		name, body string
		shape      bool // else syntax
	}{
		{"null", `null`, true},
		{"null with space", " null\n", true},
		{"array", `[]`, true},
		{"string", `"x"`, true},
		{"number", `7`, true},
		{"empty", ``, false},
		{"truncated", `{"slug":`, false},
		{"trailing", `{"slug":"a"}{}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v body
			err := Decode([]byte(tc.body), &v)
			var se *ShapeError
			var sy *SyntaxError
			if tc.shape && !errors.As(err, &se) || !tc.shape && !errors.As(err, &sy) {
				t.Fatalf("Decode(%q) = %#v, want a shape error %v", tc.body, err, tc.shape)
			}
		})
	}
	var v body
	if err := Decode([]byte(`{"slug":"a"}`), &v); err != nil || v.Slug != "a" {
		t.Fatalf("a good body: %v, %+v", err, v)
	}
}

// BenchmarkCheckStrictKeys measures the key check alone on a heartbeat-like
// body (the decode it follows is not included).
func BenchmarkCheckStrictKeys(b *testing.B) {
	type deploy struct {
		ID        string `json:"id"`
		DropletID int64  `json:"dropletId,omitempty"`
		Region    string `json:"region,omitempty"`
		Size      string `json:"size,omitempty"`
	}
	type reaper struct {
		IdleChecks     int64     `json:"idleChecks"`
		LimitMinutes   int64     `json:"limitMinutes"`
		LastActivityAt time.Time `json:"lastActivityAt"`
		CIActive       bool      `json:"ciActive"`
	}
	type heartbeat struct {
		EnvironmentSlug  string     `json:"environmentSlug"`
		Deployment       deploy     `json:"deployment"`
		AgentVersion     string     `json:"agentVersion"`
		SentAt           time.Time  `json:"sentAt"`
		Reaper           reaper     `json:"reaper"`
		SessionExpiresAt *time.Time `json:"sessionExpiresAt,omitempty"`
	}
	body := []byte(`{"environmentSlug":"demo-harbor",` +
		`"deployment":{"id":"dep-1","dropletId":4242,"region":"nyc3","size":"s-1vcpu-1gb"},` +
		`"agentVersion":"agent/1","sentAt":"2026-01-01T00:00:00Z",` +
		`"reaper":{"idleChecks":3,"limitMinutes":30,"lastActivityAt":"2025-12-31T23:55:00Z","ciActive":false},` +
		`"sessionExpiresAt":"2026-01-02T00:00:00Z"}`)
	typ := reflect.TypeFor[*heartbeat]()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := checkStrictKeys(body, typ); err != nil {
			b.Fatal(err)
		}
	}
}
