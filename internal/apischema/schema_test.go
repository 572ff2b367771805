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
			// anyOf [<schema>, null], each branch of one type: a type
			// array is less portable (docs/operations.md, "MCP server").
			alts, ok := rprops[name].(Schema)["anyOf"].([]any)
			if !ok || len(alts) != 2 || alts[1].(Schema)["type"] != "null" || rprops[name].(Schema)["type"] != nil {
				t.Fatalf("response %s %v; want anyOf [<schema>, {type: null}]", name, rprops[name])
			}
			if _, ok := alts[0].(Schema)["type"].(string); !ok {
				t.Errorf("response %s's first branch %v; want a single type", name, alts[0])
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

type node struct {
	Name     string  `json:"name"`
	Children []node  `json:"children"`
	Parent   *node   `json:"parent"`
	Sample   *sample `json:"sample,omitempty"`
}

// TestComponents: named structs become $refs into one collection, a
// request and a response of the same type are two components, a
// recursive type refers to itself, and a nullable reference admits null.
func TestComponents(t *testing.T) {
	c := NewComponents()
	resp := c.For(reflect.TypeFor[node](), Response)
	req := c.For(reflect.TypeFor[node](), Request)
	if resp["$ref"] != "#/components/schemas/node" || req["$ref"] != "#/components/schemas/nodeInput" {
		t.Fatalf("refs %v and %v", resp, req)
	}
	for _, name := range []string{"node", "nodeInput", "sample", "sampleInput", "inner", "innerInput"} {
		t.Run(name, func(t *testing.T) {
			if _, ok := c.Schemas[name]; !ok {
				t.Errorf("component %s missing; have %v", name, keys(c.Schemas))
			}
		})
	}
	props := c.Schemas["node"]["properties"].(Schema)
	// children is a nullable slice: anyOf [array, null].
	if items := props["children"].(Schema)["anyOf"].([]any)[0].(Schema)["items"].(Schema); items["$ref"] != "#/components/schemas/node" {
		t.Errorf("recursive items %v", items)
	}
	parent := props["parent"].(Schema)
	alts, ok := parent["anyOf"].([]any)
	if !ok || len(alts) != 2 || alts[0].(Schema)["$ref"] != "#/components/schemas/node" || alts[1].(Schema)["type"] != "null" {
		t.Errorf("nullable reference %v; want anyOf [$ref, null]", parent)
	}
	if _, ok := props["sample"].(Schema)["anyOf"]; ok {
		t.Errorf("omitempty pointer admits null: %v", props["sample"])
	}
	if c.Schemas["nodeInput"]["additionalProperties"] != false {
		t.Errorf("request component is open")
	}
	// The inline form is unchanged: For still describes everything in place.
	if s := For(reflect.TypeFor[node](), Response); s["type"] != "object" {
		t.Errorf("inline schema %v", s)
	}
}

func keys(m map[string]Schema) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestRawObject: a json.RawMessage field tagged schema:"object" is
// {"type": "object"} in both modes; untagged it stays the keywordless
// schema that admits any value (docs/operations.md, "MCP server").
func TestRawObject(t *testing.T) {
	type withRaw struct {
		Obj json.RawMessage `json:"obj,omitempty" schema:"object"`
		Any json.RawMessage `json:"any,omitempty"`
	}
	for _, m := range []Mode{Request, Response} {
		props := For(reflect.TypeFor[withRaw](), m)["properties"].(Schema)
		if !reflect.DeepEqual(props["obj"], Schema{"type": "object"}) || len(props["any"].(Schema)) != 0 {
			t.Errorf("mode %d: obj %v, any %v; want {type: object} and {}", m, props["obj"], props["any"])
		}
	}
}
