package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// shapeRow is one row of TestOpenAPIShapeRefusals as run: the operation's
// document key ("POST /api/admin/boxes") and the body sent.
type shapeRow struct {
	tc      shapeCase
	op      string
	body    []byte
	refused bool
}

// constraintKeywords are the JSON Schema keywords that refuse a value for
// shape; "required" is counted per property named.
var constraintKeywords = []string{"pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
	"enum", "const", "minLength", "maxLength", "minItems", "maxItems", "uniqueItems", "not"}

// checkShapeCoverage: every request body in the document has an accepted
// row, and every constraint it declares (a keyword on a property at any
// depth, each name in a required list) is broken, alone, by a refusal
// row: with that one keyword taken out of the schema the row's body is
// accepted. A hand row was already seen refused by the daemon too; where
// no hand row breaks a constraint, one is derived from an accepted row
// (deriveBreaks) and sent: the daemon must refuse it for shape. So each
// declared constraint is one the daemon enforces (docs/operations.md,
// "OpenAPI").
func checkShapeCoverage(t *testing.T, e *shapeEnv, raw []byte, rows []shapeRow) {
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	comps := doc["components"].(map[string]any)["schemas"].(map[string]any)
	byOp := map[string][]shapeRow{}
	for _, r := range rows {
		byOp[r.op] = append(byOp[r.op], r)
	}
	for _, path := range slices.Sorted(maps.Keys(doc["paths"].(map[string]any))) {
		item := doc["paths"].(map[string]any)[path].(map[string]any)
		for _, method := range slices.Sorted(maps.Keys(item)) {
			op, ok := item[method].(map[string]any)
			if !ok || op["requestBody"] == nil {
				continue
			}
			key := strings.ToUpper(method) + " " + path
			schema := resolveRefs(op["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"], comps)
			t.Run(key, func(t *testing.T) {
				opRows := byOp[key]
				if !slices.ContainsFunc(opRows, func(r shapeRow) bool { return !r.refused }) {
					t.Errorf("no accepted row")
				}
				full := compileSchema(t, schema)
				// The hand refusal rows the whole schema refuses (all of
				// them, as each row checked), decoded once.
				var refusals []any
				for _, r := range opRows {
					if inst := instance(t, r.body); r.refused && full.Validate(inst) != nil {
						refusals = append(refusals, inst)
					}
				}
				for _, c := range constraintsOf(schema) {
					if shapeSelectors[key+" "+c.String()] != "" {
						continue
					}
					alone := compileSchema(t, without(schema, c.path, c.keyword))
					if slices.ContainsFunc(refusals, func(inst any) bool { return alone.Validate(inst) == nil }) {
						continue
					}
					if !deriveBreaks(t, e, full, alone, schemaAt(schema, c.path), c, opRows) {
						t.Errorf("no refusal row breaks %s alone, and none could be derived from an accepted row", c)
					}
				}
			})
		}
	}
}

// constraint is one keyword at one place in a schema: path is the
// property path ("reaper.limitMinutes", "tags[]"), keyword the keyword or
// "required:NAME".
type constraint struct {
	path    []string
	keyword string
}

func (c constraint) String() string {
	return strings.Join(append(slices.Clone(c.path), c.keyword), "/")
}

// constraintsOf lists s's constraints: its own keywords, its required
// names, and those of its properties, items and branches.
func constraintsOf(s any) []constraint {
	var out []constraint
	var walk func(s any, path []string)
	walk = func(s any, path []string) {
		m, ok := s.(map[string]any)
		if !ok {
			return
		}
		for _, k := range constraintKeywords {
			if _, ok := m[k]; ok {
				out = append(out, constraint{slices.Clone(path), k})
			}
		}
		if req, ok := m["required"].([]any); ok {
			for _, name := range req {
				out = append(out, constraint{slices.Clone(path), "required:" + name.(string)})
			}
		}
		if props, ok := m["properties"].(map[string]any); ok {
			for _, name := range slices.Sorted(maps.Keys(props)) {
				walk(props[name], append(slices.Clone(path), name))
			}
		}
		walk(m["items"], append(slices.Clone(path), "[]"))
		for _, k := range []string{"oneOf", "anyOf", "allOf"} {
			if branches, ok := m[k].([]any); ok {
				for i, b := range branches {
					walk(b, append(slices.Clone(path), fmt.Sprintf("%s[%d]", k, i)))
				}
			}
		}
		for _, k := range []string{"if", "then", "else"} {
			walk(m[k], append(slices.Clone(path), k))
		}
	}
	walk(s, nil)
	return out
}

// without is a deep copy of s with keyword removed at path.
func without(s any, path []string, keyword string) any {
	m, ok := s.(map[string]any)
	if !ok {
		return s
	}
	out := maps.Clone(m)
	if len(path) == 0 {
		if name, ok := strings.CutPrefix(keyword, "required:"); ok {
			out["required"] = slices.DeleteFunc(slices.Clone(m["required"].([]any)), func(v any) bool { return v == name })
		} else {
			delete(out, keyword)
		}
		return out
	}
	head, rest := path[0], path[1:]
	switch {
	case head == "[]":
		out["items"] = without(m["items"], rest, keyword)
	case head == "if" || head == "then" || head == "else":
		out[head] = without(m[head], rest, keyword)
	case strings.HasSuffix(head, "]") && (strings.HasPrefix(head, "oneOf[") || strings.HasPrefix(head, "anyOf[") || strings.HasPrefix(head, "allOf[")):
		k, idx, _ := strings.Cut(strings.TrimSuffix(head, "]"), "[")
		var i int
		fmt.Sscan(idx, &i)
		branches := slices.Clone(m[k].([]any))
		branches[i] = without(branches[i], rest, keyword)
		out[k] = branches
	default:
		props := maps.Clone(m["properties"].(map[string]any))
		props[head] = without(props[head], rest, keyword)
		out["properties"] = props
	}
	return out
}

// compileSchema compiles schema with santhosh-tekuri/jsonschema (JSON
// Schema 2020-12: a validator other than the one the rows were checked
// with).
func compileSchema(t *testing.T, schema any) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	if err := c.AddResource("body.json", schema); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("body.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// instance is body decoded for jsonschema.
func instance(t *testing.T, body []byte) any {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

// resolveRefs is s with every components $ref replaced by a copy of its
// target (the request schemas hold no cycle).
func resolveRefs(s any, comps map[string]any) any {
	switch v := s.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			return resolveRefs(comps[strings.TrimPrefix(ref, "#/components/schemas/")], comps)
		}
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = resolveRefs(x, comps)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = resolveRefs(x, comps)
		}
		return out
	}
	return s
}

// deriveBreaks derives from the accepted rows a body that breaks c alone
// (a required key deleted, a value just outside a range, a string the
// pattern refuses...) and sends it: the daemon must refuse it for shape
// (400 or 422 with a shape code). It reports whether a body was derived.
func deriveBreaks(t *testing.T, e *shapeEnv, full, alone *jsonschema.Schema, node map[string]any, c constraint, rows []shapeRow) bool {
	t.Helper()
	for _, r := range rows {
		if r.refused {
			continue
		}
		for _, b := range breakingBodies(t, node, c, r.body) {
			inst := instance(t, b)
			if full.Validate(inst) == nil || alone.Validate(inst) != nil {
				continue // does not break c, or not c alone
			}
			got, _, _ := e.send(r.tc, b)
			if (got.Status != 400 && got.Status != 422) || !shapeCodes[got.Code] {
				t.Errorf("%s: the schema refuses %s but the daemon answers %s", c, b, got)
			}
			return true
		}
	}
	return false
}

// breakingBodies are copies of body with the value at c's place replaced
// by candidates that may break c's keyword (the caller keeps those that
// break it alone), or, for required, with the key deleted.
func breakingBodies(t *testing.T, node map[string]any, c constraint, body []byte) [][]byte {
	path := instancePath(c.path)
	var out [][]byte
	edit := func(path []string, f func(parent map[string]any, key string)) {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		if !editAt(v, path, f) {
			return
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	if name, ok := strings.CutPrefix(c.keyword, "required:"); ok {
		edit(append(slices.Clone(path), name), func(obj map[string]any, key string) { delete(obj, key) })
		return out
	}
	for _, cand := range candidates(node, c.keyword) {
		edit(path, func(parent map[string]any, key string) { parent[key] = cand })
	}
	return out
}

// candidates are values that may break keyword of node.
func candidates(node map[string]any, keyword string) []any {
	num := func() float64 { f, _ := node[keyword].(float64); return f }
	switch keyword {
	case "pattern":
		return []any{"", "-", "A", "a b", "\n", "\u202e", strings.Repeat("z", 300), "!"}
	case "minimum":
		return []any{num() - 1, num() - 0.5}
	case "maximum":
		return []any{num() + 1, num() + 0.5}
	case "exclusiveMinimum", "exclusiveMaximum":
		return []any{num()}
	case "enum", "const":
		return []any{"zz-not-listed", -1, false}
	case "minLength":
		return []any{""}
	case "maxLength":
		return []any{strings.Repeat("a", int(num())+1)}
	case "minItems":
		return []any{[]any{}}
	case "maxItems":
		items := make([]any, int(num())+1)
		for i := range items {
			items[i] = fmt.Sprintf("item-%d", i)
		}
		return []any{items}
	}
	return nil
}

// instancePath is a constraint's path in the body: its schema path
// without the branch segments (oneOf[i], if, then...), which do not move
// in the instance.
func instancePath(path []string) []string {
	var out []string
	for _, p := range path {
		if p == "if" || p == "then" || p == "else" || strings.HasPrefix(p, "oneOf[") || strings.HasPrefix(p, "anyOf[") || strings.HasPrefix(p, "allOf[") {
			continue
		}
		out = append(out, p)
	}
	return out
}

// editAt calls f with the object holding path's last key, creating the
// key's parent array when a "[]" element is absent; false when the place
// does not exist in v (or path is empty).
func editAt(v any, path []string, f func(parent map[string]any, key string)) bool {
	obj, ok := v.(map[string]any)
	if !ok || len(path) == 0 {
		return false
	}
	if len(path) >= 2 && path[1] == "[]" {
		arr, _ := obj[path[0]].([]any)
		if len(path) == 2 {
			holder := map[string]any{}
			if len(arr) > 0 {
				holder["x"] = arr[0]
			}
			f(holder, "x")
			obj[path[0]] = append([]any{holder["x"]}, arr[min(1, len(arr)):]...)
			return true
		}
		if len(arr) == 0 {
			return false
		}
		return editAt(arr[0], path[2:], f)
	}
	if len(path) == 1 {
		f(obj, path[0])
		return true
	}
	return editAt(obj[path[0]], path[1:], f)
}

// schemaAt is the schema node at a constraint's schema path.
func schemaAt(s any, path []string) map[string]any {
	m, _ := s.(map[string]any)
	for _, p := range path {
		switch {
		case p == "[]":
			m, _ = m["items"].(map[string]any)
		case p == "if" || p == "then" || p == "else":
			m, _ = m[p].(map[string]any)
		case strings.HasSuffix(p, "]"):
			k, idx, _ := strings.Cut(strings.TrimSuffix(p, "]"), "[")
			var i int
			fmt.Sscan(idx, &i)
			m, _ = m[k].([]any)[i].(map[string]any)
		default:
			props, _ := m["properties"].(map[string]any)
			m, _ = props[p].(map[string]any)
		}
	}
	return m
}
