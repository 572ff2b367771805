package apischema

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

type inner struct {
	A string `json:"a"`
}

type sample struct {
	inner
	Path   string            `path:"p" json:"-"`
	Name   string            `json:"name"`
	Opt    string            `json:"opt,omitempty"`
	Zero   time.Time         `json:"zero,omitzero"`
	Ptr    *int64            `json:"ptr"`
	List   []string          `json:"list"`
	Counts map[string]int    `json:"counts"`
	Raw    json.RawMessage   `json:"raw"`
	Bytes  []byte            `json:"bytes"`
	Nested inner             `json:"nested"`
	Float  float64           `json:"float"`
	Flag   bool              `json:"flag"`
	Step   time.Duration     `json:"step"`
	Tags   map[string]string `json:"-"`
}

// unexported is left out like any unexported field.
type withPrivate struct {
	private string
	Shown   string `json:"shown"`
}

var _ = withPrivate{private: ""}

// TestFor: JSON names, flattening, omitempty and each kind's schema follow
// encoding/json; requests are closed objects with nothing required,
// responses open with every always-present field required.
func TestFor(t *testing.T) {
	typ := reflect.TypeFor[sample]()
	req, resp := For(typ, Request), For(typ, Response)
	props := req["properties"].(Schema)
	want := map[string]string{"a": "string", "name": "string", "opt": "string", "zero": "string", "ptr": "integer",
		"list": "array", "counts": "object", "bytes": "string", "nested": "object", "float": "number", "flag": "boolean", "step": "integer"}
	for name, typ := range want {
		t.Run(name, func(t *testing.T) {
			p, ok := props[name].(Schema)
			if !ok || p["type"] != typ {
				t.Errorf("property %s = %v; want type %s", name, props[name], typ)
			}
		})
	}
	if raw, ok := props["raw"].(Schema); !ok || len(raw) != 0 {
		t.Errorf("raw = %v; want the empty schema", props["raw"])
	}
	if len(props) != len(want)+1 {
		t.Errorf("%d properties %v; want %d (no parameter, unexported or \"-\" field)", len(props), props, len(want)+1)
	}
	if req["additionalProperties"] != false || req["required"] != nil {
		t.Errorf("request: additionalProperties %v, required %v; want false and none", req["additionalProperties"], req["required"])
	}
	if resp["additionalProperties"] != nil {
		t.Errorf("response is closed")
	}
	got := resp["required"].([]string)
	wantReq := []string{"a", "name", "ptr", "list", "counts", "raw", "bytes", "nested", "float", "flag", "step"}
	if !reflect.DeepEqual(got, wantReq) {
		t.Errorf("response required %v; want %v", got, wantReq)
	}
	// encoding/json writes null for a nil pointer, slice or map without
	// omitempty: the response schema must admit it, the request schema
	// stays as lean as MCP tool schemas want it.
	rprops := resp["properties"].(Schema)
	for _, name := range []string{"ptr", "list", "counts", "bytes"} {
		t.Run("nullable "+name, func(t *testing.T) {
			ty, ok := rprops[name].(Schema)["type"].([]string)
			if !ok || len(ty) != 2 || ty[1] != "null" {
				t.Errorf("response %s type %v; want [<type> null]", name, rprops[name].(Schema)["type"])
			}
			if _, ok := props[name].(Schema)["type"].(string); !ok {
				t.Errorf("request %s type %v; want a single type", name, props[name].(Schema)["type"])
			}
		})
	}
	for _, name := range []string{"name", "opt", "zero", "nested"} {
		t.Run("not nullable "+name, func(t *testing.T) {
			if _, ok := rprops[name].(Schema)["type"].(string); !ok {
				t.Errorf("response %s type %v; want a single type", name, rprops[name].(Schema)["type"])
			}
		})
	}
	if p := For(reflect.TypeFor[withPrivate](), Request)["properties"].(Schema); len(p) != 1 || p["shown"] == nil {
		t.Errorf("unexported field described: %v", p)
	}
	if props["zero"].(Schema)["format"] != "date-time" {
		t.Errorf("time is not a date-time string")
	}
}
